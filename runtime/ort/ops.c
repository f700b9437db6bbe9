// The ONNX Runtime side of edgeinfer's operators (domain ai.edgeinfer):
// binding to the loaded library, the OrtCustomOp tables, and each
// operator's checks of its tensors before it hands a job to its kernel
// (paged_attention.c, matmul_q4.c) and the kernel's work items to ONNX Runtime's
// intra-op thread pool, so the kernels use the session's threads and no
// others.
//
// Why a second dlopen: onnxruntime_go loads the library but does not expose
// its OrtApi, and a custom operator calls the C API through it. dlopen with
// RTLD_NOLOAD takes a reference to the copy already loaded (never a second
// copy), whose OrtGetApiBase gives the API table.

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/onnxruntime_c_api.h"

#include "gather_blocks.h"
#include "matmul_q4.h"
#include "now.h"
#include "ops.h"
#include "paged_attention.h"
#include "rotary_qkv.h"

// Kernel timing (ops.h; below, after the operators): whether it is on, and
// MatMulNBits' hand-outs to the pool and its threads' time inside them.
static int timing;
static long long q4_parallel_ns, q4_busy_ns;

static const OrtApi* api;
// api24: the same table where the runtime serves version 24, else NULL
// (input's in-place shape read).
static const OrtApi* api24;
int ei_ops_shape_in_place = 1;

static OrtStatus* fail(const char* format, ...) __attribute__((format(printf, 1, 2)));
static OrtStatus* fail(const char* format, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, format);
  vsnprintf(msg, sizeof msg, format, ap);
  va_end(ap);
  return api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

#define TRY(x)                   \
  do {                           \
    OrtStatus* st_ = (x);        \
    if (st_ != NULL) return st_; \
  } while (0)

typedef struct {
  const OrtValue* v;
  ONNXTensorElementDataType type;
  size_t rank;
  int64_t dims[8];
  void* data;
} tensor;

// input reads input i of a node; t->v is NULL for an absent optional one.
// Where the runtime has C API 24 (ONNX Runtime 1.24 and later) the type and
// shape are read in place (GetTensorElementTypeAndShapeDataReference);
// before it, through an OrtTensorTypeAndShapeInfo that each read allocates
// and frees. A decode step reads 300–400 inputs (four a matrix product, nine
// an attention node): BenchmarkNodeInputs times a node's inputs both ways.
static OrtStatus* input(const char* op, OrtKernelContext* ctx, size_t i, tensor* t) {
  memset(t, 0, sizeof *t);
  TRY(api->KernelContext_GetInput(ctx, i, &t->v));
  if (t->v == NULL) return NULL;
  if (api24 != NULL && ei_ops_shape_in_place) {
    const int64_t* dims;
    TRY(api24->GetTensorElementTypeAndShapeDataReference(t->v, &t->type, &dims, &t->rank));
    if (t->rank > 8) return fail("%s: input %zu has rank %zu", op, i, t->rank);
    if (t->rank > 0) memcpy(t->dims, dims, t->rank * sizeof t->dims[0]);
    return api->GetTensorMutableData((OrtValue*)t->v, &t->data);
  }
  OrtTensorTypeAndShapeInfo* info;
  TRY(api->GetTensorTypeAndShape(t->v, &info));
  OrtStatus* st = api->GetTensorElementType(info, &t->type);
  if (st == NULL) st = api->GetDimensionsCount(info, &t->rank);
  if (st == NULL && t->rank > 8) st = fail("%s: input %zu has rank %zu", op, i, t->rank);
  if (st == NULL) st = api->GetDimensions(info, t->dims, t->rank);
  api->ReleaseTensorTypeAndShapeInfo(info);
  if (st != NULL) return st;
  return api->GetTensorMutableData((OrtValue*)t->v, &t->data);
}

// output allocates output i of dims and sets *data (a float* or an
// int64_t*, by the output's type) to its data.
static OrtStatus* output(OrtKernelContext* ctx, size_t i, const int64_t* dims, size_t rank, void* data) {
  OrtValue* v;
  TRY(api->KernelContext_GetOutput(ctx, i, dims, rank, &v));
  return api->GetTensorMutableData(v, (void**)data);
}

// scratch is memory one run of a node needs and frees before it returns (a
// step's rotated q/k/v, a prefill chunk's gathered keys, quantised
// activations). Blocks of EI_ARENA_MIN bytes and more come from the
// session's allocator, ONNX Runtime's arena, which keeps its regions from
// run to run; smaller ones from malloc's free lists. Not malloc for the
// large ones: the package pins glibc's mmap threshold at 128 KiB
// (trim_glibc.go), so each would be a fresh mapping, paged in anew at every
// step (prefill ran 12–18 % slower so: BenchmarkDecodeRate's prefill rates).
typedef struct {
  OrtAllocator* arena;  // NULL: p came from posix_memalign
  void* p;
} scratch;

#define EI_ARENA_MIN (64 << 10)

static OrtMemoryInfo* cpu_memory;  // the CPU arena's description, for KernelContext_GetAllocator

// scratch_get sets s->p to bytes of memory aligned to 64 bytes (NULL for 0
// bytes); what (out of memory, or too large) goes in the error.
static OrtStatus* scratch_get(OrtKernelContext* ctx, size_t bytes, scratch* s, const char* what) {
  s->arena = NULL, s->p = NULL;
  if (bytes == 0) return NULL;
  if (bytes >= EI_ARENA_MIN && cpu_memory != NULL) {
    OrtStatus* st = api->KernelContext_GetAllocator(ctx, cpu_memory, &s->arena);
    if (st == NULL) st = api->AllocatorAlloc(s->arena, bytes, &s->p);
    if (st == NULL && s->p != NULL) return NULL;
    if (st != NULL) api->ReleaseStatus(st);  // falls back on malloc, which says whether memory is short
    if (s->arena != NULL) api->ReleaseAllocator(s->arena);
    s->arena = NULL, s->p = NULL;
  }
  if (posix_memalign(&s->p, 64, bytes) != 0) {
    s->p = NULL;
    return api->CreateStatus(ORT_FAIL, what);
  }
  return NULL;
}

static void scratch_put(scratch* s) {
  if (s->arena != NULL) {
    OrtStatus* st = api->AllocatorFree(s->arena, s->p);  // the arena's free reports nothing to act on
    if (st != NULL) api->ReleaseStatus(st);
    api->ReleaseAllocator(s->arena);
  } else {
    free(s->p);
  }
  s->arena = NULL, s->p = NULL;
}

// run_items runs fn over n independent items: a decode step's few (up to
// 16 tokens or rows) on this thread, sparing the pool a hand-over, more
// on the session's threads.
static OrtStatus* run_items(OrtKernelContext* ctx, void (*fn)(void*, size_t), size_t n, void* job) {
  if (n > 16) return api->KernelContext_ParallelFor(ctx, fn, n, 0, job);
  for (size_t i = 0; i < n; i++) fn(job, i);
  return NULL;
}

// check_shape wants rank dimensions equal to want, where want[d] ≥ 0.
static OrtStatus* check_shape(const char* op, const char* name, const tensor* t, size_t rank, const int64_t* want) {
  if (t->rank != rank) return fail("%s: %s has rank %zu, want %zu", op, name, t->rank, rank);
  for (size_t d = 0; d < rank; d++)
    if (want[d] >= 0 && t->dims[d] != want[d])
      return fail("%s: %s dimension %zu is %lld, want %lld", op, name, d, (long long)t->dims[d],
                  (long long)want[d]);
  return NULL;
}

// ---------------------------------------------------------------------------
// PagedAttention (the contract is in paged_attention.c).

typedef struct {
  int64_t num_heads, kv_heads;
  float scale;  // 0: 1/sqrt(head_dim)
} attention_node;

// rotary_inputs checks a rotary step's inputs (RotaryQKV's, and
// PagedAttention's fused form's) and fills j's shapes and input pointers
// (j->Hq and j->Hkv set): the stacked projection qkv [B, T, (Hq +
// 2·Hkv)·D] with D even, position_ids [B, T] (int64 by the op's input
// type), cos_cache and sin_cache [P, D/2]. qkv_name is what the error calls
// the projection.
static OrtStatus* rotary_inputs(const char* op, const char* qkv_name, const tensor* qkv, const tensor* pos,
                                const tensor* cos_cache, const tensor* sin_cache, ei_rotary_job* j) {
  const int64_t parts = j->Hq + 2 * j->Hkv;
  if (qkv->rank != 3 || qkv->dims[2] % parts != 0 || (qkv->dims[2] / parts) % 2 != 0)
    return fail("%s: %s is rank %zu, last dimension %lld; want [batch, seq, (num_heads + 2·kv_num_heads)·head_dim] "
                "= [·, ·, %lld·D] with D even",
                op, qkv_name, qkv->rank, qkv->rank ? (long long)qkv->dims[qkv->rank - 1] : -1LL, (long long)parts);
  j->B = qkv->dims[0], j->T = qkv->dims[1], j->D = qkv->dims[2] / parts;
  TRY(check_shape(op, "position_ids", pos, 2, (int64_t[]){j->B, j->T}));
  TRY(check_shape(op, "cos_cache", cos_cache, 2, (int64_t[]){-1, j->D / 2}));
  j->P = cos_cache->dims[0];
  TRY(check_shape(op, "sin_cache", sin_cache, 2, (int64_t[]){j->P, j->D / 2}));
  j->qkv = qkv->data, j->pos = pos->data, j->cos = cos_cache->data, j->sin = sin_cache->data;
  return NULL;
}

// rotary_run runs a rotary job's tokens and names a position outside the
// caches (RotaryQKV, and PagedAttention's fused form).
static OrtStatus* rotary_run(const char* op, OrtKernelContext* ctx, ei_rotary_job* j) {
  TRY(run_items(ctx, ei_rotary_work, (size_t)(j->B * j->T), j));
  if (j->bad != 0)
    return fail("%s: position_ids[%lld] is %lld, outside the rotary caches' %lld positions", op,
                (long long)(j->bad - 1), (long long)j->pos[j->bad - 1], (long long)j->P);
  return NULL;
}

static const char* attention_inputs[] = {"query",        "key",          "value",     "key_cache",  "value_cache",
                                         "block_tables", "context_lens", "key_scale", "value_scale",
                                         "position_ids", "cos_cache",    "sin_cache",   "slots"};
#define ATTENTION_INPUTS 13

// rotary_prepare runs RotaryQKV's arithmetic inside PagedAttention (the
// fused form: query is the stacked projection qkv and position_ids,
// cos_cache and sin_cache are present): q, k and v into *buf (the caller
// puts it back), new_keys and new_values into outputs 1 and 2 when
// `outputs` (not when the node writes the pools itself). One node
// a layer instead of two: at batch 1 RotaryQKV's dispatch and its five
// output allocations cost ONNX Runtime more than its arithmetic
// (quant's TestProfileDecodeAndPrefill lists the nodes).
static OrtStatus* rotary_prepare(const char* op, OrtKernelContext* ctx, const tensor* in, ei_attention_job* a,
                                 scratch* buf, int outputs) {
  ei_rotary_job j = {0};
  j.Hq = a->Hq, j.Hkv = a->Hkv;
  TRY(rotary_inputs(op, "query (with position_ids, the stacked projection)", &in[0], &in[9], &in[10], &in[11], &j));
  const int64_t parts = j.Hq + 2 * j.Hkv;
  if (outputs) {
    TRY(output(ctx, 1, (int64_t[]){j.B, j.Hkv, j.T, j.D}, 4, &j.kh));
    TRY(output(ctx, 2, (int64_t[]){j.B, j.Hkv, j.T, j.D}, 4, &j.vh));
  }
  const int64_t n = j.B * j.T;
  const size_t floats = (size_t)(n * parts * j.D);
  TRY(scratch_get(ctx, floats * sizeof(float), buf,
                  "PagedAttention: out of memory for a step's rotated queries and keys"));
  j.q = buf->p, j.k = j.q + n * j.Hq * j.D, j.v = j.k + n * j.Hkv * j.D;
  TRY(rotary_run(op, ctx, &j));
  a->B = j.B, a->T = j.T, a->D = j.D;
  a->q = j.q, a->k = j.k, a->v = j.v;
  return NULL;
}

// attention_run is PagedAttention's compute; the fused form's scratch is
// the caller's to free, on every path.
static OrtStatus* attention_run(const attention_node* kn, OrtKernelContext* ctx, scratch* buf) {
  static const char* op = "PagedAttention";
  const char** names = attention_inputs;
  tensor in[ATTENTION_INPUTS];
  for (size_t i = 0; i < ATTENTION_INPUTS; i++) TRY(input(op, ctx, i, &in[i]));
  const int fused = in[9].v != NULL || in[10].v != NULL || in[11].v != NULL;
  static const size_t plain_needs[] = {0, 1, 2, 3, 4, 5, 6}, fused_needs[] = {0, 3, 4, 5, 6, 9, 10, 11};
  const size_t* needs = fused ? fused_needs : plain_needs;
  const size_t n_needs = fused ? sizeof fused_needs / sizeof *needs : sizeof plain_needs / sizeof *needs;
  for (size_t k = 0; k < n_needs; k++)
    if (in[needs[k]].v == NULL)
      return fail("%s: input %s is missing%s", op, names[needs[k]],
                  fused ? " (position_ids, cos_cache and sin_cache come together)" : "");
  if (fused && (in[1].v != NULL || in[2].v != NULL))
    return fail("%s: with position_ids, key and value come from query (the stacked projection): leave them empty", op);
  const int writes = in[12].v != NULL;  // the node writes the pools itself
  size_t outs = 0;
  TRY(api->KernelContext_GetOutputCount(ctx, &outs));
  if (fused && !writes && outs != 3)
    return fail("%s: %zu outputs; the fused form (with position_ids) without slots has three (output, new_keys, "
                "new_values)", op, outs);
  if ((!fused || writes) && outs != 1)
    return fail("%s: %zu outputs; the plain form, and any form with slots (the node writes the pools), has one", op,
                outs);

  ei_attention_job j = {0};
  j.Hq = kn->num_heads, j.Hkv = kn->kv_heads, j.G = j.Hq / j.Hkv;
  if (fused) {
    TRY(rotary_prepare(op, ctx, in, &j, buf, !writes));
  } else {
    if (in[0].rank != 3) return fail("%s: query has rank %zu, want 3 [B, T, Hq*D]", op, in[0].rank);
    j.B = in[0].dims[0], j.T = in[0].dims[1], j.D = in[0].dims[2] / j.Hq;
    if (j.D * j.Hq != in[0].dims[2])
      return fail("%s: query width %lld is not num_heads (%lld) times a head size", op, (long long)in[0].dims[2],
                  (long long)j.Hq);
    TRY(check_shape(op, names[1], &in[1], 3, (int64_t[]){j.B, j.T, j.Hkv * j.D}));
    TRY(check_shape(op, names[2], &in[2], 3, (int64_t[]){j.B, j.T, j.Hkv * j.D}));
    j.q = in[0].data, j.k = in[1].data, j.v = in[2].data;
  }
  TRY(check_shape(op, names[3], &in[3], 4, (int64_t[]){j.Hkv, -1, -1, j.D}));
  j.N = in[3].dims[1], j.bs = in[3].dims[2];
  TRY(check_shape(op, names[4], &in[4], 4, in[3].dims));
  if (in[3].type != in[4].type) return fail("%s: key_cache and value_cache differ in element type", op);
  TRY(check_shape(op, names[5], &in[5], 2, (int64_t[]){j.B, -1}));
  j.M = in[5].dims[1];
  TRY(check_shape(op, names[6], &in[6], 1, (int64_t[]){j.B}));
  if (in[5].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 || in[6].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64)
    return fail("%s: block_tables and context_lens must be int64", op);

  switch (in[3].type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      break;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
      j.f16 = 1;
      break;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
      j.int8 = 1;
      for (size_t i = 7; i < 9; i++) {
        if (in[i].v == NULL) return fail("%s: int8 pools need %s [Hkv, N]", op, names[i]);
        TRY(check_shape(op, names[i], &in[i], 2, (int64_t[]){j.Hkv, j.N}));
        if (in[i].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) return fail("%s: %s must be float", op, names[i]);
      }
      j.ks = in[7].data, j.vs = in[8].data;
      break;
    default:
      return fail("%s: pools must be float, float16 or int8 (element type %d)", op, (int)in[3].type);
  }
  if ((j.int8 || j.f16) && j.D > EI_WIDE_MAX)  // the kernel widens at least one slot at a time
    return fail("%s: head size %lld above %d with int8 or float16 pools", op, (long long)j.D, EI_WIDE_MAX);
  j.kc = in[3].data, j.vc = in[4].data, j.bt = in[5].data, j.cl = in[6].data;
  if (writes) {
    if (j.int8)
      return fail("%s: slots with int8 pools: the caller scatters int8 keys and values (a new key can grow its "
                  "block's scale); leave slots empty", op);
    TRY(check_shape(op, names[12], &in[12], 2, (int64_t[]){j.B, j.T}));
    const int64_t* sl = in[12].data;
    for (int64_t i = 0; i < j.B * j.T; i++)
      if (sl[i] >= j.N * j.bs)
        return fail("%s: slots[%lld] = %lld is outside the pool's %lld slots", op, (long long)i, (long long)sl[i],
                    (long long)(j.N * j.bs));
    // the pools are graph inputs the caller bound to its own memory: this
    // node is the one writer of its layer's, and ONNX Runtime copies none
    j.slots = sl, j.kdst = in[3].data, j.vdst = in[4].data;
  }
  j.scale = kn->scale > 0 ? kn->scale : 1.0f / sqrtf((float)j.D);

  // Every slot read must lie in the pool: check the table once here rather
  // than in the loops.
  for (int64_t b = 0; b < j.B; b++) {
    int64_t c = j.cl[b];
    if (c < 0 || c > j.M * j.bs)
      return fail("%s: context_lens[%lld] = %lld, but block_tables holds %lld slots per row", op, (long long)b,
                  (long long)c, (long long)(j.M * j.bs));
    for (int64_t m = 0; m * j.bs < c; m++) {
      int64_t blk = j.bt[b * j.M + m];
      if (blk < 0 || blk >= j.N)
        return fail("%s: block_tables[%lld][%lld] = %lld is outside the pool's %lld blocks", op, (long long)b,
                    (long long)m, (long long)blk, (long long)j.N);
    }
    if (c + j.T > j.max_keys) j.max_keys = c + j.T;
  }

  TRY(output(ctx, 0, (int64_t[]){j.B, j.T, j.Hq * j.D}, 3, &j.out));
  if (j.B == 0 || j.T == 0) return NULL;

  // Prefill: every row's keys and values gathered first (ei_attention_prep).
  scratch gathered = {0};
  size_t bytes = ei_attention_prep_bytes(&j);
  if (bytes > 0) {
    TRY(scratch_get(ctx, bytes, &gathered, "PagedAttention: out of memory for a prefill step's keys and values"));
    j.kt = gathered.p, j.vt = j.kt + bytes / sizeof(float) / 2;
    OrtStatus* st = api->KernelContext_ParallelFor(ctx, ei_attention_prep, (size_t)(j.B * j.Hkv), 0, &j);
    if (st != NULL) {
      scratch_put(&gathered);
      return st;
    }
  }
  // A prefill step's items in 16 batches rather than one fixed batch a
  // thread: the pool deals each thread a shard of them and lets a thread
  // done with its own take the rest of another's, where with two fixed
  // halves one delayed thread doubled a 256-token chunk's attention time
  // in some runs (TestProfileDecodeAndPrefill, 22 against 47 ms).
  size_t items = ei_attention_items(&j);
  OrtStatus* st = api->KernelContext_ParallelFor(ctx, ei_attention_work, items, items > 64 ? 16 : 0, &j);
  scratch_put(&gathered);
  TRY(st);
  if (__atomic_load_n(&j.failed, __ATOMIC_RELAXED))
    return api->CreateStatus(ORT_FAIL, "PagedAttention: out of memory for attention scores");
  return NULL;
}

static OrtStatus* attention_compute(void* node, OrtKernelContext* ctx) {
  scratch buf = {0};
  OrtStatus* st = attention_run(node, ctx, &buf);
  scratch_put(&buf);
  return st;
}

static OrtStatus* attention_create(const OrtKernelInfo* info, void** out) {
  attention_node* k = calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(ORT_FAIL, "PagedAttention: out of memory");
  OrtStatus* st = api->KernelInfoGetAttribute_int64(info, "num_heads", &k->num_heads);
  if (st == NULL) st = api->KernelInfoGetAttribute_int64(info, "kv_num_heads", &k->kv_heads);
  if (st == NULL && (k->num_heads <= 0 || k->kv_heads <= 0 || k->num_heads % k->kv_heads != 0 ||
                     k->num_heads / k->kv_heads > EI_MAX_GROUP))
    st = fail("PagedAttention: num_heads %lld must be a multiple of kv_num_heads %lld, at most %d times it",
              (long long)k->num_heads, (long long)k->kv_heads, EI_MAX_GROUP);
  if (st != NULL) {
    free(k);
    return st;
  }
  OrtStatus* none = api->KernelInfoGetAttribute_float(info, "scale", &k->scale);
  if (none != NULL) {  // optional
    api->ReleaseStatus(none);
    k->scale = 0;
  }
  *out = k;
  return NULL;
}

static ONNXTensorElementDataType attention_input_type(size_t i) {
  switch (i) {
    case 3: case 4: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;  // float, float16 or int8, checked in compute
    case 5: case 6: case 9: case 12: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    default: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
}

// ---------------------------------------------------------------------------
// MatMulNBits (the contract is in matmul_q4.c): com.microsoft.MatMulNBits'
// inputs and attributes, for bits 4 or 8, block_size 32 and no zero points,
// and inputs of its own: two for the RMSNorm in front of a projection:
// input 4, the norm's weight gamma [K] (A is normalised first, with the
// attribute epsilon), and input 5, skip (shaped as A: A+skip is
// normalised, and that sum is output 1) — the graph's
// (Skip)SimplifiedLayerNormalization and the MatMulNBits it feeds in one
// node (pkg/onnx/llama's norm.go fuses them); and input 6, last_index,
// for the head of a paged graph (last_rows says what it does). Output 2,
// int64 and shaped as A without its last axis, is the index of each row's
// largest output (pkg/vec's Argmax of the row): a language model's head
// gives the greedy token with its logits (pkg/onnx/llama's greedy.go adds
// it).

// Constant weights are packed when the node loads into memory of the
// node's own (ei_q4_pack's layout): the initializers may be pages of the
// model's external-data file, which stay in 4 KiB pages, where the packed
// copy on the heap is collapsed into 2 MiB pages with the rest of the
// session's memory (hugepages.go), and a decode step reads every weight
// once. Weights that are graph inputs are packed at each run.
typedef struct {
  int64_t K, N, bits, swiglu;
  float eps;   // the norm's epsilon (input 4 given)
  int f16;     // w's scales are float16
  uint8_t* w;  // packed, or NULL: pack the inputs at each run
  int threads; // the most threads a run of the node was seen on
} q4_node;

static OrtStatus* q4_run(q4_node* kn, OrtKernelContext* ctx, tensor* in);

// last_rows is input 6, last_index [B]: the node multiplies row
// last_index[b] of each batch entry of A [B, T, K] (plus skip's, input 5,
// when given: their sum is the row normalised) and its outputs are [B, N]
// and [B] — the language-model head of a paged graph, which takes each
// sequence's last position, in one node where ONNX operators took five
// (the residual Add, then Unsqueeze, Expand, GatherElements and Reshape
// of the rows; pkg/onnx/llama's lastrow.go). It copies the rows (summed)
// into *rows and points in[0] at them as A [B, K], with skip left out:
// the sum is the same float additions the ONNX Add made, so the logits are
// those of the five nodes' graph bit for bit. Output 1 (the sum) is not
// written.
static OrtStatus* last_rows(const char* op, OrtKernelContext* ctx, int64_t K, tensor* in, scratch* rows) {
  tensor* a = &in[0];
  if (a->rank != 3 || a->dims[2] != K)
    return fail("%s: with last_index (input 6), A is [batch, seq, K = %lld]; it has rank %zu", op, (long long)K,
                a->rank);
  const int64_t B = a->dims[0], T = a->dims[1];
  TRY(check_shape(op, "last_index (input 6)", &in[6], 1, (int64_t[]){B}));
  if (in[6].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64) return fail("%s: last_index (input 6) must be int64", op);
  const float* skip = NULL;
  if (in[5].v != NULL) {
    TRY(check_shape(op, "skip (input 5)", &in[5], 3, a->dims));
    skip = in[5].data;
  }
  const int64_t* last = in[6].data;
  for (int64_t b = 0; b < B; b++)
    if (last[b] < 0 || last[b] >= T)
      return fail("%s: last_index[%lld] = %lld, outside A's %lld rows of batch entry %lld", op, (long long)b,
                  (long long)last[b], (long long)T, (long long)b);
  TRY(scratch_get(ctx, (size_t)(B * K) * sizeof(float), rows, "MatMulNBits: out of memory for the last rows"));
  float* r = rows->p;
  const float* x = a->data;
  for (int64_t b = 0; b < B; b++) {
    const float* src = x + (b * T + last[b]) * K;
    if (skip == NULL) {
      memcpy(r + b * K, src, (size_t)K * sizeof(float));
      continue;
    }
    const float* s = skip + (b * T + last[b]) * K;
    for (int64_t k = 0; k < K; k++) r[b * K + k] = src[k] + s[k];
  }
  a->rank = 2, a->dims[1] = K, a->data = r;
  memset(&in[5], 0, sizeof in[5]);
  return NULL;
}

static OrtStatus* q4_compute(void* node, OrtKernelContext* ctx) {
  static const char* op = "MatMulNBits";
  q4_node* kn = node;
  tensor in[7] = {0};
  // B and scales packed when the node loaded (their sizes checked then) are
  // not read again: a shape query an input, ~0.2 µs each, in a node whose
  // decode-step product at 110m takes ~30 µs.
  for (size_t i = 0; i < 7; i++) {
    if (kn->w != NULL && (i == 1 || i == 2)) continue;
    TRY(input(op, ctx, i, &in[i]));
  }
  if (in[6].v == NULL) return q4_run(kn, ctx, in);
  scratch rows = {0};  // last_index: the product of one row of each batch entry
  TRY(last_rows(op, ctx, kn->K, in, &rows));
  OrtStatus* st = q4_run(kn, ctx, in);
  scratch_put(&rows);
  return st;
}

// q4_run is q4_compute once its inputs are read (and last_rows has made
// in[0] the rows the product takes).
static OrtStatus* q4_run(q4_node* kn, OrtKernelContext* ctx, tensor* in) {
  static const char* op = "MatMulNBits";
  if (in[3].v != NULL)
    return fail("%s: zero_points are not supported (symmetric weights only); build the bundle's weights "
                "without -asym, or use com.microsoft.MatMulNBits", op);
  ei_q4_job j = {0};
  j.bits = (int)kn->bits, j.swiglu = (int)kn->swiglu, j.K = kn->K, j.N = kn->N, j.nb = (kn->K + EI_Q4_BLOCK - 1) / EI_Q4_BLOCK;
  if (in[0].rank < 1 || in[0].dims[in[0].rank - 1] != j.K)
    return fail("%s: A's last dimension is %lld, want K = %lld", op,
                in[0].rank ? (long long)in[0].dims[in[0].rank - 1] : -1LL, (long long)j.K);
  j.M = 1;
  for (size_t d = 0; d + 1 < in[0].rank; d++) j.M *= in[0].dims[d];
  if (kn->w == NULL) {
    TRY(check_shape(op, "B", &in[1], 3, (int64_t[]){j.N, j.nb, EI_Q4_BLOCK * j.bits / 8}));
    int64_t ns = 1;
    for (size_t d = 0; d < in[2].rank; d++) ns *= in[2].dims[d];
    if (ns != j.N * j.nb)
      return fail("%s: scales has %lld values, want N·ceil(K/32) = %lld", op, (long long)ns, (long long)(j.N * j.nb));
  }
  j.a = in[0].data, j.w = kn->w, j.f16 = kn->f16;
  size_t outputs = 0;
  TRY(api->KernelContext_GetOutputCount(ctx, &outputs));
  if (in[4].v != NULL) {
    TRY(check_shape(op, "norm weight (input 4)", &in[4], 1, (int64_t[]){j.K}));
    j.gamma = in[4].data, j.eps = kn->eps;
  }
  if (in[5].v != NULL) {
    if (j.gamma == NULL) return fail("%s: skip (input 5) needs the norm weight (input 4)", op);
    TRY(check_shape(op, "skip (input 5)", &in[5], in[0].rank, in[0].dims));
    if (outputs < 2) return fail("%s: skip (input 5) needs output 1 for the sum A+skip", op);
    j.skip = in[5].data;
    TRY(output(ctx, 1, in[0].dims, in[0].rank, &j.sum));
  }

  int64_t odims[8];
  memcpy(odims, in[0].dims, in[0].rank * sizeof odims[0]);
  odims[in[0].rank - 1] = EI_Q4_Y(&j);
  TRY(output(ctx, 0, odims, in[0].rank, &j.y));
  if (outputs >= 3) {
    if (j.swiglu) return fail("%s: output 2 (each row's largest output) with swiglu: leave it out", op);
    TRY(output(ctx, 2, in[0].dims, in[0].rank - 1, &j.best));
    if (j.N == 0)
      for (int64_t r = 0; r < j.M; r++) j.best[r] = 0;  // an empty row's argmax, as pkg/vec's
  }
  if (j.M == 0 || j.N == 0) return NULL;

  scratch packed = {0}, act = {0};
  if (j.w == NULL) {
    j.f16 = ei_q4_f16_exact(in[2].data, (size_t)(j.N * j.nb));
    TRY(scratch_get(ctx, ei_q4_packed_size(j.bits, j.f16, j.N, j.nb), &packed,
                    "MatMulNBits: out of memory for the packed weights"));
    ei_q4_pack(j.bits, j.f16, j.swiglu, in[1].data, in[2].data, j.N, j.nb, packed.p);
    j.w = packed.p;
  }
  OrtStatus* fst = scratch_get(ctx, ei_q4_scratch(j.M, j.nb), &act, "MatMulNBits: out of memory for quantised activations");
  if (fst != NULL) {
    scratch_put(&packed);
    return fst;
  }
  ei_q4_bind(&j, act.p);
  // Quantising a is ~1/N of the product's work: on this thread unless a is
  // large, sparing the pool one hand-over (a wake-up) per run.
  OrtStatus* st = NULL;
  if (j.M * j.K <= 1 << 18)
    for (int64_t i = 0; i < j.M; i++) ei_q4_quantize(&j, (size_t)i);
  else
    st = api->KernelContext_ParallelFor(ctx, ei_q4_quantize, (size_t)j.M, EI_Q4_BATCHES, &j);
  // The product in batches (ei_q4_plan), split for the most threads a run
  // of the node was seen on (the pool's size is not in the custom-op API;
  // the first run takes EI_Q4_BATCHES in order). Concurrent runs may race
  // on the count: a lower one stored last only costs the split until the
  // next run raises it again.
  scratch best = {0};
  if (st == NULL) {
    const size_t batches = ei_q4_plan(&j, __atomic_load_n(&kn->threads, __ATOMIC_RELAXED));
    if (j.best != NULL) {
      st = scratch_get(ctx, ei_q4_best_scratch(&j), &best, "MatMulNBits: out of memory for the rows' largest outputs");
      if (st == NULL) ei_q4_best_bind(&j, best.p);
    }
    // with kernel timing on: the hand-out's wall time and the threads' time
    // inside it (ei_ops_product_threads in ops.h)
    j.timed = __atomic_load_n(&timing, __ATOMIC_RELAXED);
    const long long p0 = j.timed ? ei_now_ns() : 0;
    if (st == NULL) st = api->KernelContext_ParallelFor(ctx, ei_q4_batch, batches, batches, &j);
    if (j.timed) {
      __atomic_fetch_add(&q4_parallel_ns, ei_now_ns() - p0, __ATOMIC_RELAXED);
      __atomic_fetch_add(&q4_busy_ns, (long long)__atomic_load_n(&j.busy_ns, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    }
    if (st == NULL && j.best != NULL) ei_q4_best(&j);
    const int seen = ei_q4_threads_seen(&j);
    if (seen > __atomic_load_n(&kn->threads, __ATOMIC_RELAXED)) __atomic_store_n(&kn->threads, seen, __ATOMIC_RELAXED);
  }
  scratch_put(&best);
  scratch_put(&act);
  scratch_put(&packed);
  return st;
}

static void q4_destroy(void* node) {
  q4_node* k = node;
  free(k->w);
  free(k);
}

// q4_constant finds constant input i holding `count` elements (*data left
// NULL when it is not a constant or not of that size: then the node packs
// the inputs at each run, where compute checks them).
static OrtStatus* q4_constant(const OrtKernelInfo* info, size_t i, size_t count, const void** data) {
  *data = NULL;
  int constant = 0;
  const OrtValue* v = NULL;
  TRY(api->KernelInfoGetConstantInput_tensor(info, i, &constant, &v));
  if (!constant || v == NULL) return NULL;
  OrtTensorTypeAndShapeInfo* shape;
  TRY(api->GetTensorTypeAndShape(v, &shape));
  size_t n = 0;
  OrtStatus* st = api->GetTensorShapeElementCount(shape, &n);
  api->ReleaseTensorTypeAndShapeInfo(shape);
  if (st != NULL || n != count) return st;
  return api->GetTensorMutableData((OrtValue*)v, (void**)data);
}

static OrtStatus* q4_create(const OrtKernelInfo* info, void** out) {
  int64_t block = 0;
  q4_node* k = calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(ORT_FAIL, "MatMulNBits: out of memory");
  OrtStatus* st = api->KernelInfoGetAttribute_int64(info, "K", &k->K);
  if (st == NULL) st = api->KernelInfoGetAttribute_int64(info, "N", &k->N);
  if (st == NULL) st = api->KernelInfoGetAttribute_int64(info, "bits", &k->bits);
  if (st == NULL) st = api->KernelInfoGetAttribute_int64(info, "block_size", &block);
  if (st == NULL) {  // optional: y is silu(gate)·up of the two stacked halves of B
    OrtStatus* none = api->KernelInfoGetAttribute_int64(info, "swiglu", &k->swiglu);
    if (none != NULL) api->ReleaseStatus(none), k->swiglu = 0;
  }
  if (st == NULL) {  // optional: the norm's epsilon, when input 4 is given
    OrtStatus* none = api->KernelInfoGetAttribute_float(info, "epsilon", &k->eps);
    if (none != NULL) api->ReleaseStatus(none), k->eps = 1e-5f;
  }
  if (st == NULL && !(k->eps >= 0))
    st = fail("MatMulNBits: epsilon %g must be at least 0", (double)k->eps);
  if (st == NULL && k->swiglu != 0 && (k->swiglu != 1 || k->N % (2 * EI_Q4_GROUP) != 0))
    st = fail("MatMulNBits: swiglu %lld with N %lld: swiglu is 0 or 1, and N (gate and up stacked) a multiple of %d",
              (long long)k->swiglu, (long long)k->N, 2 * EI_Q4_GROUP);
  if (st == NULL && ((k->bits != 4 && k->bits != 8) || block != EI_Q4_BLOCK || k->K <= 0 || k->N <= 0))
    st = fail("MatMulNBits: bits %lld, block_size %lld, K %lld, N %lld: this kernel runs bits 4 or 8, block_size 32; "
              "use com.microsoft.MatMulNBits for others", (long long)k->bits, (long long)block, (long long)k->K,
              (long long)k->N);
  if (st == NULL) {
    const int64_t nb = (k->K + EI_Q4_BLOCK - 1) / EI_Q4_BLOCK;
    const void *b = NULL, *scales = NULL;
    st = q4_constant(info, 1, (size_t)(k->N * nb * EI_Q4_BLOCK * k->bits / 8), &b);
    if (st == NULL) st = q4_constant(info, 2, (size_t)(k->N * nb), &scales);
    if (st == NULL && b != NULL && scales != NULL) {  // both, or pack at each run
      k->f16 = ei_q4_f16_exact(scales, (size_t)(k->N * nb));
      if (posix_memalign((void**)&k->w, 64, ei_q4_packed_size((int)k->bits, k->f16, k->N, nb)) != 0) {
        k->w = NULL;
        st = api->CreateStatus(ORT_FAIL, "MatMulNBits: out of memory for the weights");
      } else {
        ei_q4_pack((int)k->bits, k->f16, (int)k->swiglu, b, scales, k->N, nb, k->w);
      }
    }
  }
  if (st != NULL) {
    q4_destroy(k);
    return st;
  }
  *out = k;
  return NULL;
}

static ONNXTensorElementDataType q4_input_type(size_t i) {
  switch (i) {
    case 1: case 3: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
    case 6: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    default: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
}

static ONNXTensorElementDataType q4_output_type(size_t i) {
  return i == 2 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}

// ---------------------------------------------------------------------------
// GatherBlockQuantized (the contract is in gather_blocks.c): data uint8
// [V, H·bits/8], indices int64 or int32 of any shape, scales float
// [V, H/block_size], no zero_points (input 3); attributes bits (4 or 8),
// block_size (a power of 2 from 16, dividing H), gather_axis 0,
// quantize_axis 1. Output [indices…, H]. An index outside [−V, V) is an
// error, as it is com.microsoft's; a negative one counts from the end.

typedef struct {
  int64_t bits, block;
} gather_node;

static OrtStatus* gather_compute(void* node, OrtKernelContext* ctx) {
  static const char* op = "GatherBlockQuantized";
  const gather_node* kn = node;
  tensor in[4];
  for (size_t i = 0; i < 4; i++) TRY(input(op, ctx, i, &in[i]));
  if (in[3].v != NULL)
    return fail("%s: zero_points are not supported (symmetric tables only); use com.microsoft.GatherBlockQuantized", op);
  if (in[0].rank != 2 || in[0].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8)
    return fail("%s: data must be uint8 [rows, columns·bits/8] (rank %zu)", op, in[0].rank);
  ei_gather_job j = {.bits = kn->bits, .block = kn->block};
  const int64_t V = in[0].dims[0];
  j.H = in[0].dims[1] * 8 / kn->bits;
  if (j.H % j.block != 0)
    return fail("%s: %lld columns are not whole blocks of %lld", op, (long long)j.H, (long long)j.block);
  TRY(check_shape(op, "scales", &in[2], 2, (int64_t[]){V, j.H / j.block}));
  if (in[2].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) return fail("%s: scales must be float", op);
  const int wide = in[1].type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  if (!wide && in[1].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32) return fail("%s: indices must be int64 or int32", op);
  int64_t n = 1, odims[9];
  for (size_t d = 0; d < in[1].rank; d++) n *= in[1].dims[d], odims[d] = in[1].dims[d];
  odims[in[1].rank] = j.H;
  TRY(output(ctx, 0, odims, in[1].rank + 1, &j.out));
  if (n == 0) return NULL;
  scratch rows = {0};
  TRY(scratch_get(ctx, (size_t)n * sizeof(int64_t), &rows, "GatherBlockQuantized: out of memory for the indices"));
  int64_t* r = rows.p;
  for (int64_t i = 0; i < n; i++) {
    int64_t x = wide ? ((const int64_t*)in[1].data)[i] : ((const int32_t*)in[1].data)[i];
    if (x < -V || x >= V) {
      scratch_put(&rows);
      return fail("%s: indices[%lld] = %lld, outside the table's %lld rows", op, (long long)i, (long long)x, (long long)V);
    }
    r[i] = x < 0 ? x + V : x;
  }
  j.data = in[0].data, j.scales = in[2].data, j.rows = r;
  OrtStatus* st = run_items(ctx, ei_gather_work, (size_t)n, &j);
  scratch_put(&rows);
  return st;
}

static OrtStatus* gather_create(const OrtKernelInfo* info, void** out) {
  gather_node* k = calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(ORT_FAIL, "GatherBlockQuantized: out of memory");
  int64_t gather_axis = 0, quantize_axis = 1;
  k->bits = 4, k->block = 128;  // com.microsoft's defaults
  struct {
    const char* name;
    int64_t* v;
  } attrs[] = {{"bits", &k->bits}, {"block_size", &k->block}, {"gather_axis", &gather_axis}, {"quantize_axis", &quantize_axis}};
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    OrtStatus* none = api->KernelInfoGetAttribute_int64(info, attrs[i].name, attrs[i].v);
    if (none != NULL) api->ReleaseStatus(none);  // absent: the default
  }
  if ((k->bits != 4 && k->bits != 8) || k->block < 16 || (k->block & (k->block - 1)) != 0 || gather_axis != 0 ||
      (quantize_axis != 1 && quantize_axis != -1)) {
    OrtStatus* st = fail("GatherBlockQuantized: bits %lld, block_size %lld, gather_axis %lld, quantize_axis %lld: this "
                         "kernel runs bits 4 or 8, a block_size that is a power of 2 from 16, gather_axis 0 and "
                         "quantize_axis 1; use com.microsoft.GatherBlockQuantized for others",
                         (long long)k->bits, (long long)k->block, (long long)gather_axis, (long long)quantize_axis);
    free(k);
    return st;
  }
  *out = k;
  return NULL;
}

static ONNXTensorElementDataType gather_input_type(size_t i) {
  switch (i) {
    case 0: case 3: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
    case 1: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;  // int64 or int32, checked in compute
    default: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
}

// ---------------------------------------------------------------------------
// RotaryQKV (the contract is in rotary_qkv.c): inputs qkv [B, T, (Hq +
// 2·Hkv)·D], position_ids [B, T], cos_cache and sin_cache [P, D/2];
// attributes num_heads and kv_num_heads; outputs q, k, v [B, T, H·D] (q and
// k rotated) and new_keys, new_values [B, Hkv, T, D].

typedef struct {
  int64_t heads, kv_heads;
} rotary_node;

static OrtStatus* rotary_compute(void* node, OrtKernelContext* ctx) {
  static const char* op = "RotaryQKV";
  const rotary_node* kn = node;
  tensor in[4];
  for (size_t i = 0; i < 4; i++) TRY(input(op, ctx, i, &in[i]));
  ei_rotary_job j = {0};
  j.Hq = kn->heads, j.Hkv = kn->kv_heads;
  TRY(rotary_inputs(op, "qkv", &in[0], &in[1], &in[2], &in[3], &j));
  TRY(output(ctx, 0, (int64_t[]){j.B, j.T, j.Hq * j.D}, 3, &j.q));
  TRY(output(ctx, 1, (int64_t[]){j.B, j.T, j.Hkv * j.D}, 3, &j.k));
  TRY(output(ctx, 2, (int64_t[]){j.B, j.T, j.Hkv * j.D}, 3, &j.v));
  TRY(output(ctx, 3, (int64_t[]){j.B, j.Hkv, j.T, j.D}, 4, &j.kh));
  TRY(output(ctx, 4, (int64_t[]){j.B, j.Hkv, j.T, j.D}, 4, &j.vh));
  return rotary_run(op, ctx, &j);
}

static OrtStatus* rotary_create(const OrtKernelInfo* info, void** out) {
  rotary_node* k = calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(ORT_FAIL, "RotaryQKV: out of memory");
  OrtStatus* st = api->KernelInfoGetAttribute_int64(info, "num_heads", &k->heads);
  if (st == NULL) st = api->KernelInfoGetAttribute_int64(info, "kv_num_heads", &k->kv_heads);
  if (st == NULL && (k->heads <= 0 || k->kv_heads <= 0))
    st = fail("RotaryQKV: num_heads %lld and kv_num_heads %lld must be positive", (long long)k->heads,
              (long long)k->kv_heads);
  if (st != NULL) {
    free(k);
    return st;
  }
  *out = k;
  return NULL;
}

static ONNXTensorElementDataType rotary_input_type(size_t i) {
  return i == 1 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}

// ---------------------------------------------------------------------------
// The operator tables. Each operator is an opdef whose first member is the
// OrtCustomOp ONNX Runtime holds, so the callbacks find their opdef from
// the pointer ONNX Runtime passes back.

typedef struct {
  OrtCustomOp op;
  const char* name;
  size_t inputs, required;  // inputs from `required` on are optional
  size_t outputs;           // 0: one
  size_t outputs_required;  // outputs from this on are optional (0: none are)
  ONNXTensorElementDataType (*input_type)(size_t i);
  ONNXTensorElementDataType (*output_type)(size_t i);  // NULL: every output float
  OrtStatus* (*create)(const OrtKernelInfo* info, void** node);
  OrtStatus* (*compute)(void* node, OrtKernelContext* ctx);
  void (*destroy)(void* node);
} opdef;

#define DEF(o) ((const opdef*)(o))

static const char* op_name(const OrtCustomOp* op) { return DEF(op)->name; }
static const char* op_ep(const OrtCustomOp* op) { (void)op; return NULL; }  // CPU
static size_t n_inputs(const OrtCustomOp* op) { return DEF(op)->inputs; }
static size_t n_outputs(const OrtCustomOp* op) { return DEF(op)->outputs ? DEF(op)->outputs : 1; }
static ONNXTensorElementDataType input_type(const OrtCustomOp* op, size_t i) { return DEF(op)->input_type(i); }
static ONNXTensorElementDataType output_type(const OrtCustomOp* op, size_t i) {
  return DEF(op)->output_type ? DEF(op)->output_type(i) : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}
static OrtCustomOpInputOutputCharacteristic input_kind(const OrtCustomOp* op, size_t i) {
  return i >= DEF(op)->required ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
}
static OrtCustomOpInputOutputCharacteristic output_kind(const OrtCustomOp* op, size_t i) {
  return DEF(op)->outputs_required && i >= DEF(op)->outputs_required ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
}
static OrtMemType input_mem(const OrtCustomOp* op, size_t i) { (void)op, (void)i; return OrtMemTypeDefault; }
static int start_version(const OrtCustomOp* op) { (void)op; return 1; }
static int end_version(const OrtCustomOp* op) { (void)op; return 1; }
static OrtStatus* create_kernel(const OrtCustomOp* op, const OrtApi* a, const OrtKernelInfo* info, void** node) {
  (void)a;
  return DEF(op)->create(info, node);
}

static void free_node(void* node) { free(node); }

static opdef ops[] = {
    // Inputs past the query are checked in compute: the plain form needs
    // 1–6, the fused one 3–6 and 9–11 (a run of required ones cannot say
    // both).
    {.name = "PagedAttention", .inputs = ATTENTION_INPUTS, .required = 1, .outputs = 3, .outputs_required = 1,
     .input_type = attention_input_type,
     .create = attention_create, .compute = attention_compute, .destroy = free_node},
    {.name = "MatMulNBits", .inputs = 7, .required = 3, .outputs = 3, .outputs_required = 1,
     .input_type = q4_input_type, .output_type = q4_output_type, .create = q4_create, .compute = q4_compute,
     .destroy = q4_destroy},
    {.name = "GatherBlockQuantized", .inputs = 4, .required = 3, .outputs = 1, .input_type = gather_input_type,
     .create = gather_create, .compute = gather_compute, .destroy = free_node},
    {.name = "RotaryQKV", .inputs = 4, .required = 4, .outputs = 5, .input_type = rotary_input_type,
     .create = rotary_create, .compute = rotary_compute, .destroy = free_node},
};
#define N_OPS (sizeof ops / sizeof ops[0])

// Timing (ops.h): each operator's compute runs under timed, which counts
// its runs and wall time while timing is set and only calls it while not
// (one load and one call more a node).
static long long timed_ns[N_OPS], timed_runs[N_OPS];

static OrtStatus* timed(size_t i, void* node, OrtKernelContext* ctx) {
  if (!__atomic_load_n(&timing, __ATOMIC_RELAXED)) return ops[i].compute(node, ctx);
  const long long t0 = ei_now_ns();
  OrtStatus* st = ops[i].compute(node, ctx);
  __atomic_fetch_add(&timed_ns[i], ei_now_ns() - t0, __ATOMIC_RELAXED);
  __atomic_fetch_add(&timed_runs[i], 1, __ATOMIC_RELAXED);
  return st;
}
#define TIMED(i) \
  static OrtStatus* timed_##i(void* node, OrtKernelContext* ctx) { return timed(i, node, ctx); }
TIMED(0)
TIMED(1)
TIMED(2)
TIMED(3)
static OrtStatus* (*const timed_fns[])(void*, OrtKernelContext*) = {timed_0, timed_1, timed_2, timed_3};
_Static_assert(sizeof timed_fns / sizeof timed_fns[0] == N_OPS, "one timed wrapper an operator");

void ei_ops_set_timing(int on) { __atomic_store_n(&timing, on, __ATOMIC_RELAXED); }
size_t ei_ops_count(void) { return N_OPS; }

const char* ei_ops_time(size_t i, long long* ns, long long* runs) {
  if (i >= N_OPS) return NULL;
  *ns = __atomic_load_n(&timed_ns[i], __ATOMIC_RELAXED);
  *runs = __atomic_load_n(&timed_runs[i], __ATOMIC_RELAXED);
  return ops[i].name;
}

void ei_ops_time_reset(void) {
  for (size_t i = 0; i < N_OPS; i++) {
    __atomic_store_n(&timed_ns[i], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&timed_runs[i], 0, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&q4_parallel_ns, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&q4_busy_ns, 0, __ATOMIC_RELAXED);
}

void ei_ops_product_threads(long long* parallel_ns, long long* busy_ns) {
  *parallel_ns = __atomic_load_n(&q4_parallel_ns, __ATOMIC_RELAXED);
  *busy_ns = __atomic_load_n(&q4_busy_ns, __ATOMIC_RELAXED);
}

static OrtCustomOpDomain* domain;
static void* library;

// The C API version the kernels need: KernelContext_ParallelFor and
// GetStartVersion arrived in 17 (ONNX Runtime 1.17). The op structs say 17
// too, so ONNX Runtime reads none of their later fields.
#define EI_API_VERSION 17

int edgeinfer_ops_init(const char* path, unsigned off, int prefetch, char* err, size_t errlen) {
  if (domain != NULL) return 0;
  library = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (library == NULL) {
    snprintf(err, errlen, "%s is not loaded: %s", path, dlerror());
    return -1;
  }
  const OrtApiBase* (*base)(void) = (const OrtApiBase* (*)(void))dlsym(library, "OrtGetApiBase");
  if (base == NULL || (api = base()->GetApi(EI_API_VERSION)) == NULL) {
    snprintf(err, errlen, "%s has no C API version %d (ONNX Runtime 1.17 or later needed)", path, EI_API_VERSION);
    dlclose(library), library = NULL, api = NULL;
    return -1;
  }
  // asked only of a runtime that has it: an older one logs the refusal
  int major = 0, minor = 0;
  if (sscanf(base()->GetVersionString(), "%d.%d", &major, &minor) == 2 && (major > 1 || minor >= 24))
    api24 = base()->GetApi(24);
  ei_attention_init(off);
  ei_q4_init(off, prefetch);
  OrtStatus* mst = api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu_memory);
  if (mst != NULL) api->ReleaseStatus(mst), cpu_memory = NULL;  // then scratch comes from malloc alone
  OrtStatus* st = api->CreateCustomOpDomain(EDGEINFER_OP_DOMAIN, &domain);
  for (size_t i = 0; st == NULL && i < N_OPS; i++) {
    ops[i].op = (OrtCustomOp){
        .version = EI_API_VERSION,
        .GetName = op_name,
        .GetExecutionProviderType = op_ep,
        .GetInputType = input_type,
        .GetInputTypeCount = n_inputs,
        .GetOutputType = output_type,
        .GetOutputTypeCount = n_outputs,
        .KernelDestroy = ops[i].destroy,
        .GetInputCharacteristic = input_kind,
        .GetOutputCharacteristic = output_kind,
        .GetInputMemoryType = input_mem,
        .CreateKernelV2 = create_kernel,
        .KernelComputeV2 = timed_fns[i],
        .GetStartVersion = start_version,
        .GetEndVersion = end_version,
    };
    st = api->CustomOpDomain_Add(domain, &ops[i].op);
  }
  if (st != NULL) {
    snprintf(err, errlen, "%s", api->GetErrorMessage(st));
    api->ReleaseStatus(st);
    edgeinfer_ops_release();
    return -1;
  }
  return 0;
}

int edgeinfer_ops_register(void* session_options, char* err, size_t errlen) {
  if (domain == NULL) {
    snprintf(err, errlen, "custom operators are not initialised");
    return -1;
  }
  OrtStatus* st = api->AddCustomOpDomain((OrtSessionOptions*)session_options, domain);
  if (st != NULL) {
    snprintf(err, errlen, "%s", api->GetErrorMessage(st));
    api->ReleaseStatus(st);
    return -1;
  }
  return 0;
}

void edgeinfer_ops_release(void) {
  if (domain != NULL) api->ReleaseCustomOpDomain(domain);
  domain = NULL;
  if (library != NULL) dlclose(library);
  library = NULL;
  api = NULL, api24 = NULL;
}
