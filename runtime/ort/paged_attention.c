// ai.edgeinfer.PagedAttention: attention of a step's queries over a paged
// KV cache read in place, plus the step's own keys and values.
//
// Why a kernel of our own: built from standard ONNX operators, paged
// attention is ~25 small nodes per layer (Gather the blocks, reshapes and
// transposes into head-group layout, two score MatMuls, masks, Concat,
// Softmax, Split, two MatMuls, Add, transposes back). At batch 1 each of them
// costs ONNX Runtime more in dispatch than in arithmetic, and the Gather
// copies every cached key and value once per step. This kernel reads the
// pool through the block table directly and replaces all of them with one
// node. ONNX Runtime 1.30 has no CPU kernel for com.microsoft.PagedAttention,
// and GroupQueryAttention copies the whole past into its `present` output.
//
// Inputs (the paged decoder contract, see pkg/onnx/llama):
//   0 query        float [B, T, Hq·D]   (rotated)
//   1 key          float [B, T, Hkv·D]  (rotated; this step's keys)
//   2 value        float [B, T, Hkv·D]
//   3 key_cache    float or int8 [Hkv, N, bs, D]
//   4 value_cache  same type and shape
//   5 block_tables int64 [B, M]
//   6 context_lens int64 [B]           (cached tokens per row)
//   7 key_scale    float [Hkv, N]      (int8 pools only: one scale per block)
//   8 value_scale  float [Hkv, N]
// Output: float [B, T, Hq·D].
// Attributes: num_heads, kv_num_heads (int), scale (float, default 1/sqrt(D)).
//
// Token t of row b (position context_lens[b] + t) sees the row's cached
// slots j < context_lens[b] and the step's tokens t' ≤ t. Query head
// i reads KV head i / (Hq/Hkv) (grouped-query attention). Work is split
// over (row, KV head, block of tokens) with ONNX Runtime's own thread pool,
// so the kernel uses the session's intra-op threads and no others.

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/onnxruntime_c_api.h"

#include "paged_attention.h"

// The generic loops (head sizes not a multiple of 16, CPUs without AVX2)
// and the int8 pools' loops are compiled for the baseline and, on x86-64 with glibc,
// also as AVX2 and AVX-512 clones picked at load time; arm64 gets NEON from
// its baseline. The float path's two hot loops also have hand-written AVX2
// versions (score_avx2, value_avx2), chosen in edgeinfer_ops_init.
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__clang__)
#define EI_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EI_CLONES
#endif

// Tokens of one row handled by one work item: enough query rows to reuse
// each key and value read from memory several times in prefill, few
// enough that a decode step (T = 1) still splits over the KV heads.
#define TOKEN_BLOCK 4

static const OrtApi* api;

typedef struct {
  int64_t num_heads, kv_heads;
  float scale;  // 0: 1/sqrt(head_dim)
} kernel;

typedef struct {
  const float *q, *k, *v;
  const void *kc, *vc;  // pools
  const float *ks, *vs; // int8 pools: per-block scales [Hkv, N]
  const int64_t *bt, *cl;
  float* out;
  int64_t B, T, Hq, Hkv, G, D, N, bs, M;
  int64_t token_blocks;
  int int8;
  float scale;
  int64_t max_keys;  // max over rows of context_lens + T
  int failed;        // set by a work item that could not get memory
} job;

// ---------------------------------------------------------------------------
// Vector helpers, written so the compiler vectorises them without
// reassociation flags: eight independent lanes, summed at the end.

static inline float dot_f32(const float* restrict a, const float* restrict b, int64_t n) {
  float acc[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

static inline float dot_i8(const float* restrict a, const int8_t* restrict b, int64_t n) {
  float acc[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) acc[l] += a[i + l] * (float)b[i + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; i++) s += a[i] * (float)b[i];
  return s;
}

static inline void axpy_f32(float* restrict y, float w, const float* restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += w * x[i];
}

static inline void axpy_i8(float* restrict y, float w, const int8_t* restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += w * (float)x[i];
}

// exp for x ≤ 0 (scores minus their maximum): Cephes' expf polynomial with
// the exponent put in by bit arithmetic, branch-free so a row vectorises.
// Relative error ~2e-7; inputs below -87 give 0.
static inline float exp_neg(float x) {
  x = x < -87.0f ? -87.0f : x;
  float fx = floorf(x * 1.44269504088896341f + 0.5f);
  float r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union { int32_t i; float f; } e;
  e.i = ((int32_t)fx + 127) << 23;
  return p * e.f;
}

// ---------------------------------------------------------------------------
// The float path's two inner loops, as functions of a run of keys (a block's
// slots, or one new token): scores s[r][col0+i] = scale·q[r]·key_i for the
// query rows q[0..rows), and o[r] += Σ_i s[r][col0+i]·value_i. Keys and
// values of a run are `step` floats apart. A generic version, vectorised by
// the compiler, and an AVX2+FMA one that keeps several rows and keys in
// registers (chosen at load time, see edgeinfer_ops_init).

typedef void (*score_fn)(const float* const* q, int64_t rows, const void* k, int64_t step, int64_t n,
                         int64_t D, float scale, float* s, int64_t stride, int64_t col0);
typedef void (*value_fn)(float* const* o, int64_t rows, const void* v, int64_t step, int64_t n, int64_t D,
                         float w, const float* s, int64_t stride, int64_t col0);

EI_CLONES static void score_generic(const float* const* q, int64_t rows, const void* k, int64_t step, int64_t n,
                                    int64_t D, float scale, float* s, int64_t stride, int64_t col0) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t r = 0; r < rows; r++)
      s[r * stride + col0 + i] = scale * dot_f32(q[r], (const float*)k + i * step, D);
}

EI_CLONES static void value_generic(float* const* o, int64_t rows, const void* v, int64_t step, int64_t n, int64_t D,
                                    float w, const float* s, int64_t stride, int64_t col0) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t r = 0; r < rows; r++) axpy_f32(o[r], w * s[r * stride + col0 + i], (const float*)v + i * step, D);
}

// The int8 pools' versions: keys and values converted as they are read,
// the block's scale folded into scale (scores) and w (values).
EI_CLONES static void score_i8(const float* const* q, int64_t rows, const void* k, int64_t step, int64_t n, int64_t D,
                               float scale, float* s, int64_t stride, int64_t col0) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t r = 0; r < rows; r++)
      s[r * stride + col0 + i] = scale * dot_i8(q[r], (const int8_t*)k + i * step, D);
}

EI_CLONES static void value_i8(float* const* o, int64_t rows, const void* v, int64_t step, int64_t n, int64_t D,
                               float w, const float* s, int64_t stride, int64_t col0) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t r = 0; r < rows; r++) axpy_i8(o[r], w * s[r * stride + col0 + i], (const int8_t*)v + i * step, D);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define EI_AVX2 __attribute__((target("avx2,fma")))
#define EI_HAVE_AVX2 1

// sum4 reduces four vectors to their four sums.
EI_AVX2 static inline __m128 sum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

EI_AVX2 static inline float sum1(__m256 a) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, 1)));
}

// score_avx2 takes keys four at a time against one or two query rows: up
// to eight accumulators, each key vector loaded once for both rows. D is a
// multiple of 8 (checked by the caller).
EI_AVX2 static void score_avx2(const float* const* q, int64_t rows, const void* keys, int64_t step, int64_t n,
                               int64_t D, float scale, float* s, int64_t stride, int64_t col0) {
  const float* k = keys;
  __m128 sc = _mm_set1_ps(scale);
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) {
    const float *q0 = q[r], *q1 = q[r + 1];
    float *s0 = s + r * stride + col0, *s1 = s0 + stride;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      const float* kp = k + i * step;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      for (int64_t d = 0; d < D; d += 8) {
        __m256 x0 = _mm256_loadu_ps(q0 + d), x1 = _mm256_loadu_ps(q1 + d), kv;
        kv = _mm256_loadu_ps(kp + d), a0 = _mm256_fmadd_ps(x0, kv, a0), b0 = _mm256_fmadd_ps(x1, kv, b0);
        kv = _mm256_loadu_ps(kp + step + d), a1 = _mm256_fmadd_ps(x0, kv, a1), b1 = _mm256_fmadd_ps(x1, kv, b1);
        kv = _mm256_loadu_ps(kp + 2 * step + d), a2 = _mm256_fmadd_ps(x0, kv, a2), b2 = _mm256_fmadd_ps(x1, kv, b2);
        kv = _mm256_loadu_ps(kp + 3 * step + d), a3 = _mm256_fmadd_ps(x0, kv, a3), b3 = _mm256_fmadd_ps(x1, kv, b3);
      }
      _mm_storeu_ps(s0 + i, _mm_mul_ps(sc, sum4(a0, a1, a2, a3)));
      _mm_storeu_ps(s1 + i, _mm_mul_ps(sc, sum4(b0, b1, b2, b3)));
    }
    for (; i < n; i++) {
      const float* kp = k + i * step;
      __m256 a = _mm256_setzero_ps(), b = a;
      for (int64_t d = 0; d < D; d += 8) {
        __m256 kv = _mm256_loadu_ps(kp + d);
        a = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), kv, a);
        b = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d), kv, b);
      }
      s0[i] = scale * sum1(a), s1[i] = scale * sum1(b);
    }
  }
  for (; r < rows; r++) {
    const float* q0 = q[r];
    float* s0 = s + r * stride + col0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      const float* kp = k + i * step;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t d = 0; d < D; d += 8) {
        __m256 x0 = _mm256_loadu_ps(q0 + d);
        a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(kp + d), a0);
        a1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(kp + step + d), a1);
        a2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(kp + 2 * step + d), a2);
        a3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(kp + 3 * step + d), a3);
      }
      _mm_storeu_ps(s0 + i, _mm_mul_ps(sc, sum4(a0, a1, a2, a3)));
    }
    for (; i < n; i++) {
      const float* kp = k + i * step;
      __m256 a = _mm256_setzero_ps();
      for (int64_t d = 0; d < D; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), _mm256_loadu_ps(kp + d), a);
      s0[i] = scale * sum1(a);
    }
  }
}

// value_rows adds R (≤ 3) rows' weighted values over 16 columns at a time:
// 2·R accumulators that stay in registers across the whole run of keys.
EI_AVX2 static inline __attribute__((always_inline)) void value_rows(float* const* o, int R, const float* v, int64_t step,
                                                                   int64_t n, int64_t D, float w, const float* s,
                                                                   int64_t stride) {
  for (int64_t d = 0; d < D; d += 16) {
    __m256 acc[3][2];
    for (int r = 0; r < R; r++) acc[r][0] = _mm256_loadu_ps(o[r] + d), acc[r][1] = _mm256_loadu_ps(o[r] + d + 8);
    for (int64_t i = 0; i < n; i++) {
      __m256 v0 = _mm256_loadu_ps(v + i * step + d), v1 = _mm256_loadu_ps(v + i * step + d + 8);
      for (int r = 0; r < R; r++) {
        __m256 p = _mm256_set1_ps(w * s[r * stride + i]);
        acc[r][0] = _mm256_fmadd_ps(p, v0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(p, v1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(o[r] + d, acc[r][0]), _mm256_storeu_ps(o[r] + d + 8, acc[r][1]);
  }
}

// value_avx2 needs D a multiple of 16 (checked by the caller).
EI_AVX2 static void value_avx2(float* const* o, int64_t rows, const void* values, int64_t step, int64_t n, int64_t D,
                               float w, const float* s, int64_t stride, int64_t col0) {
  const float* v = values;
  int64_t r = 0;
  for (; r + 3 <= rows; r += 3) value_rows(o + r, 3, v, step, n, D, w, s + r * stride + col0, stride);
  if (rows - r == 2) value_rows(o + r, 2, v, step, n, D, w, s + r * stride + col0, stride);
  if (rows - r == 1) value_rows(o + r, 1, v, step, n, D, w, s + r * stride + col0, stride);
}
#endif

static score_fn score_f32 = score_generic;
static value_fn value_f32 = value_generic;

// ---------------------------------------------------------------------------

// attend computes one work item: row b, KV head h, tokens [t0, t1), i.e.
// the G query heads of h for each of those tokens. s holds one score row
// of max_keys floats per query row.
EI_CLONES
static void attend(const job* j, int64_t b, int64_t h, int64_t t0, int64_t t1, float* s) {
  const int64_t G = j->G, D = j->D, bs = j->bs, ctx = j->cl[b];
  const int64_t rows = (t1 - t0) * G, stride = j->max_keys;
  const float* q[TOKEN_BLOCK * 64];  // G ≤ 64 is checked before the work is split
  float* o[TOKEN_BLOCK * 64];
  for (int64_t t = t0; t < t1; t++)
    for (int64_t g = 0; g < G; g++) {
      int64_t r = (t - t0) * G + g, off = ((b * j->T + t) * j->Hq + h * G + g) * D;
      q[r] = j->q + off;
      o[r] = j->out + off;
    }

  // The float loops: hand-written AVX2 ones where D is a multiple of 16,
  // else the generic ones; the pools' loops: those, or the int8 ones.
  score_fn score = D % 16 == 0 ? score_f32 : score_generic;
  value_fn value = D % 16 == 0 ? value_f32 : value_generic;
  score_fn pool_score = j->int8 ? score_i8 : score;
  value_fn pool_value = j->int8 ? value_i8 : value;
  const size_t elem = j->int8 ? 1 : sizeof(float);
  const int64_t* table = j->bt + b * j->M;

  // Scores against the cached slots, block by block through the table,
  // then against this step's keys: token t sees t' ≤ t, so new key tk is
  // scored by the rows of tokens max(tk, t0).. — a suffix of the rows.
  for (int64_t m = 0; m * bs < ctx; m++) {
    int64_t blk = h * j->N + table[m], n = ctx - m * bs < bs ? ctx - m * bs : bs;
    pool_score(q, rows, (const char*)j->kc + blk * bs * D * elem, D, n, D,
               j->int8 ? j->scale * j->ks[blk] : j->scale, s, stride, m * bs);
  }
  for (int64_t tk = 0; tk < t1; tk++) {
    int64_t first = ((tk > t0 ? tk : t0) - t0) * G;
    score(q + first, rows - first, j->k + ((b * j->T + tk) * j->Hkv + h) * D, 0, 1, D, j->scale,
          s + first * stride, stride, ctx + tk);
  }

  // Softmax numerators in place; each row's sum is divided out at the end.
  float inv[TOKEN_BLOCK * 64];
  for (int64_t r = 0; r < rows; r++) {
    float* sr = s + r * stride;
    int64_t n = ctx + t0 + r / G + 1;
    float mx = sr[0];
    for (int64_t c = 1; c < n; c++) mx = sr[c] > mx ? sr[c] : mx;
    float sum = 0;
    for (int64_t c = 0; c < n; c++) {
      sr[c] = exp_neg(sr[c] - mx);
      sum += sr[c];
    }
    inv[r] = 1.0f / sum;
    memset(o[r], 0, (size_t)D * sizeof(float));
  }

  // Weighted values: cached slots, then this step's.
  for (int64_t m = 0; m * bs < ctx; m++) {
    int64_t blk = h * j->N + table[m], n = ctx - m * bs < bs ? ctx - m * bs : bs;
    pool_value(o, rows, (const char*)j->vc + blk * bs * D * elem, D, n, D, j->int8 ? j->vs[blk] : 1.0f, s, stride,
               m * bs);
  }
  for (int64_t tk = 0; tk < t1; tk++) {
    int64_t first = ((tk > t0 ? tk : t0) - t0) * G;
    value(o + first, rows - first, j->v + ((b * j->T + tk) * j->Hkv + h) * D, 0, 1, D, 1.0f, s + first * stride,
          stride, ctx + tk);
  }
  for (int64_t r = 0; r < rows; r++)
    for (int64_t d = 0; d < D; d++) o[r][d] *= inv[r];
}

// work is ParallelFor's callback: item i is (row, KV head, token block).
static void work(void* p, size_t i) {
  const job* j = p;
  int64_t tb = (int64_t)i % j->token_blocks, rest = (int64_t)i / j->token_blocks;
  int64_t h = rest % j->Hkv, b = rest / j->Hkv;
  int64_t t0 = tb * TOKEN_BLOCK, t1 = t0 + TOKEN_BLOCK < j->T ? t0 + TOKEN_BLOCK : j->T;
  // Score rows: on the stack up to 32 KiB (a decode step up to ~2,700
  // cached tokens with 3 query heads per KV head), else on the heap.
  float stack[8192];
  size_t need = (size_t)((t1 - t0) * j->G * j->max_keys);
  float* s = need <= sizeof stack / sizeof stack[0] ? stack : malloc(need * sizeof(float));
  if (s == NULL) {
    __atomic_store_n((int*)&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  attend(j, b, h, t0, t1, s);
  if (s != stack) free(s);
}

// ---------------------------------------------------------------------------
// ONNX Runtime plumbing.

static OrtStatus* fail(const char* format, ...) __attribute__((format(printf, 1, 2)));
static OrtStatus* fail(const char* format, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, format);
  vsnprintf(msg, sizeof msg, format, ap);
  va_end(ap);
  return api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

#define TRY(x)                       \
  do {                               \
    OrtStatus* st_ = (x);            \
    if (st_ != NULL) return st_;     \
  } while (0)

typedef struct {
  const OrtValue* v;
  ONNXTensorElementDataType type;
  size_t rank;
  int64_t dims[8];
  void* data;
} tensor;

static OrtStatus* input(OrtKernelContext* ctx, size_t i, tensor* t) {
  memset(t, 0, sizeof *t);
  TRY(api->KernelContext_GetInput(ctx, i, &t->v));
  if (t->v == NULL) return NULL;
  OrtTensorTypeAndShapeInfo* info;
  TRY(api->GetTensorTypeAndShape(t->v, &info));
  OrtStatus* st = api->GetTensorElementType(info, &t->type);
  if (st == NULL) st = api->GetDimensionsCount(info, &t->rank);
  if (st == NULL && t->rank > 8) st = fail("PagedAttention: input %zu has rank %zu", i, t->rank);
  if (st == NULL) st = api->GetDimensions(info, t->dims, t->rank);
  api->ReleaseTensorTypeAndShapeInfo(info);
  if (st != NULL) return st;
  return api->GetTensorMutableData((OrtValue*)t->v, &t->data);
}

static const char* names[] = {"query", "key", "value", "key_cache", "value_cache",
                              "block_tables", "context_lens", "key_scale", "value_scale"};

static OrtStatus* check_shape(const tensor* t, size_t i, size_t rank, const int64_t* want) {
  if (t->rank != rank) return fail("PagedAttention: %s has rank %zu, want %zu", names[i], t->rank, rank);
  for (size_t d = 0; d < rank; d++)
    if (want[d] >= 0 && t->dims[d] != want[d])
      return fail("PagedAttention: %s dimension %zu is %lld, want %lld", names[i], d,
                  (long long)t->dims[d], (long long)want[d]);
  return NULL;
}

static OrtStatus* compute(void* k, OrtKernelContext* ctx) {
  const kernel* kn = k;
  tensor in[9];
  for (size_t i = 0; i < 9; i++) TRY(input(ctx, i, &in[i]));
  for (size_t i = 0; i < 7; i++)
    if (in[i].v == NULL) return fail("PagedAttention: input %s is missing", names[i]);

  if (in[0].rank != 3) return fail("PagedAttention: query has rank %zu, want 3 [B, T, Hq*D]", in[0].rank);
  job j = {0};
  j.B = in[0].dims[0], j.T = in[0].dims[1], j.Hq = kn->num_heads, j.Hkv = kn->kv_heads;
  j.G = j.Hq / j.Hkv, j.D = in[0].dims[2] / j.Hq;
  if (j.D * j.Hq != in[0].dims[2])
    return fail("PagedAttention: query width %lld is not num_heads (%lld) times a head size",
                (long long)in[0].dims[2], (long long)j.Hq);
  TRY(check_shape(&in[1], 1, 3, (int64_t[]){j.B, j.T, j.Hkv * j.D}));
  TRY(check_shape(&in[2], 2, 3, (int64_t[]){j.B, j.T, j.Hkv * j.D}));
  TRY(check_shape(&in[3], 3, 4, (int64_t[]){j.Hkv, -1, -1, j.D}));
  j.N = in[3].dims[1], j.bs = in[3].dims[2];
  TRY(check_shape(&in[4], 4, 4, in[3].dims));
  if (in[3].type != in[4].type) return fail("PagedAttention: key_cache and value_cache differ in element type");
  TRY(check_shape(&in[5], 5, 2, (int64_t[]){j.B, -1}));
  j.M = in[5].dims[1];
  TRY(check_shape(&in[6], 6, 1, (int64_t[]){j.B}));
  if (in[5].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 || in[6].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64)
    return fail("PagedAttention: block_tables and context_lens must be int64");

  switch (in[3].type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      break;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
      j.int8 = 1;
      for (size_t i = 7; i < 9; i++) {
        if (in[i].v == NULL) return fail("PagedAttention: int8 pools need %s [Hkv, N]", names[i]);
        TRY(check_shape(&in[i], i, 2, (int64_t[]){j.Hkv, j.N}));
        if (in[i].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) return fail("PagedAttention: %s must be float", names[i]);
      }
      j.ks = in[7].data, j.vs = in[8].data;
      break;
    default:
      return fail("PagedAttention: pools must be float or int8 (element type %d)", (int)in[3].type);
  }
  j.q = in[0].data, j.k = in[1].data, j.v = in[2].data;
  j.kc = in[3].data, j.vc = in[4].data, j.bt = in[5].data, j.cl = in[6].data;
  j.scale = kn->scale > 0 ? kn->scale : 1.0f / sqrtf((float)j.D);

  // Every slot read must lie in the pool: check the table once here rather
  // than in the loops.
  for (int64_t b = 0; b < j.B; b++) {
    int64_t c = j.cl[b];
    if (c < 0 || c > j.M * j.bs)
      return fail("PagedAttention: context_lens[%lld] = %lld, but block_tables holds %lld slots per row",
                  (long long)b, (long long)c, (long long)(j.M * j.bs));
    for (int64_t m = 0; m * j.bs < c; m++) {
      int64_t blk = j.bt[b * j.M + m];
      if (blk < 0 || blk >= j.N)
        return fail("PagedAttention: block_tables[%lld][%lld] = %lld is outside the pool's %lld blocks",
                    (long long)b, (long long)m, (long long)blk, (long long)j.N);
    }
    if (c + j.T > j.max_keys) j.max_keys = c + j.T;
  }

  OrtValue* out;
  int64_t odims[3] = {j.B, j.T, j.Hq * j.D};
  TRY(api->KernelContext_GetOutput(ctx, 0, odims, 3, &out));
  TRY(api->GetTensorMutableData(out, (void**)&j.out));
  if (j.B == 0 || j.T == 0) return NULL;

  j.token_blocks = (j.T + TOKEN_BLOCK - 1) / TOKEN_BLOCK;
  size_t items = (size_t)(j.B * j.Hkv * j.token_blocks);
  TRY(api->KernelContext_ParallelFor(ctx, work, items, 0, &j));
  if (__atomic_load_n(&j.failed, __ATOMIC_RELAXED))
    return api->CreateStatus(ORT_FAIL, "PagedAttention: out of memory for attention scores");
  return NULL;
}

static OrtStatus* create(const OrtCustomOp* op, const OrtApi* a, const OrtKernelInfo* info, void** out) {
  (void)op, (void)a;
  kernel* k = calloc(1, sizeof *k);
  if (k == NULL) return api->CreateStatus(ORT_FAIL, "PagedAttention: out of memory");
  OrtStatus* st = api->KernelInfoGetAttribute_int64(info, "num_heads", &k->num_heads);
  if (st == NULL) st = api->KernelInfoGetAttribute_int64(info, "kv_num_heads", &k->kv_heads);
  if (st == NULL && (k->num_heads <= 0 || k->kv_heads <= 0 || k->num_heads % k->kv_heads != 0 ||
                     k->num_heads / k->kv_heads > 64))
    st = fail("PagedAttention: num_heads %lld must be a multiple of kv_num_heads %lld, at most 64 times it",
              (long long)k->num_heads, (long long)k->kv_heads);
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

static void destroy(void* k) { free(k); }
static const char* op_name(const OrtCustomOp* op) { (void)op; return "PagedAttention"; }
static const char* op_ep(const OrtCustomOp* op) { (void)op; return NULL; }  // CPU
static size_t n_inputs(const OrtCustomOp* op) { (void)op; return 9; }
static size_t n_outputs(const OrtCustomOp* op) { (void)op; return 1; }

static ONNXTensorElementDataType input_type(const OrtCustomOp* op, size_t i) {
  (void)op;
  switch (i) {
    case 3: case 4: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;  // float or int8, checked in compute
    case 5: case 6: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    default: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
}
static ONNXTensorElementDataType output_type(const OrtCustomOp* op, size_t i) {
  (void)op, (void)i;
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}
static OrtCustomOpInputOutputCharacteristic input_kind(const OrtCustomOp* op, size_t i) {
  (void)op;
  return i >= 7 ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
}
static OrtCustomOpInputOutputCharacteristic output_kind(const OrtCustomOp* op, size_t i) {
  (void)op, (void)i;
  return INPUT_OUTPUT_REQUIRED;
}
static OrtMemType input_mem(const OrtCustomOp* op, size_t i) { (void)op, (void)i; return OrtMemTypeDefault; }
static int start_version(const OrtCustomOp* op) { (void)op; return 1; }
static int end_version(const OrtCustomOp* op) { (void)op; return 1; }

static OrtCustomOp op;
static OrtCustomOpDomain* domain;
static void* library;

// The C API version the kernel needs: KernelContext_ParallelFor and
// GetStartVersion arrived in 17 (ONNX Runtime 1.17). The op struct says 17
// too, so ONNX Runtime reads none of its later fields.
#define EI_API_VERSION 17

int edgeinfer_ops_init(const char* path, char* err, size_t errlen) {
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
#ifdef EI_HAVE_AVX2
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) score_f32 = score_avx2, value_f32 = value_avx2;
#endif
  op = (OrtCustomOp){
      .version = EI_API_VERSION,
      .GetName = op_name,
      .GetExecutionProviderType = op_ep,
      .GetInputType = input_type,
      .GetInputTypeCount = n_inputs,
      .GetOutputType = output_type,
      .GetOutputTypeCount = n_outputs,
      .KernelDestroy = destroy,
      .GetInputCharacteristic = input_kind,
      .GetOutputCharacteristic = output_kind,
      .GetInputMemoryType = input_mem,
      .CreateKernelV2 = create,
      .KernelComputeV2 = compute,
      .GetStartVersion = start_version,
      .GetEndVersion = end_version,
  };
  OrtStatus* st = api->CreateCustomOpDomain(EDGEINFER_OP_DOMAIN, &domain);
  if (st == NULL) st = api->CustomOpDomain_Add(domain, &op);
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
  api = NULL;
}
