// The int4/int8 matrix kernel's interface to the operator glue (ops.c);
// nothing here knows ONNX Runtime.
#ifndef EDGEINFER_MATMUL_Q4_H
#define EDGEINFER_MATMUL_Q4_H

#include <stddef.h>
#include <stdint.h>

// Weights arrive in com.microsoft.MatMulNBits' layout for block 32 and no
// zero points: b [N, nb, 32·bits/8] (bits 4: low nibble = even element,
// code 8 = zero; bits 8: code 128 = zero), scales [N, nb], nb = ceil(K/32).
// ei_q4_pack rearranges them once, when the node loads, into groups of
// EI_Q4_GROUP weight rows (matmul_q4.c describes the layout).
#define EI_Q4_BLOCK 32
#define EI_Q4_GROUP 8
// EI_Q4_BATCHES is how many batches a pass is handed to the thread pool in:
// a prefill chunk has hundreds of small items, and one task each cost more
// in the pool than their arithmetic (TinyLM's 256x256 by 768, two threads).
#define EI_Q4_BATCHES 16
// EI_Q4_REGIONS is the most threads a decode step's product is split over
// by regions (ei_q4_plan); a larger pool gets EI_Q4_BATCHES batches.
#define EI_Q4_REGIONS 16
// EI_Q4_DECODE_ROWS: a product of at most this many activation rows is a
// decode step's (one token a sequence, the engine's batch at most 8): it
// reads its weights once, from memory, so it prefetches them and splits by
// regions; more rows are a prefill chunk's, which reads each weight chunk
// from the cache many times.
#define EI_Q4_DECODE_ROWS 8
#define EI_Q4_Y(j) ((j)->swiglu ? (j)->N / 2 : (j)->N)  // y's row length

typedef struct {
  const float* a;   // [M, K]
  float* y;         // [M, N]
  const uint8_t* w;  // packed weights (ei_q4_pack)
  int bits;          // 4 or 8
  // swiglu: B stacks a gate and an up projection of N/2 rows each, and y
  // [M, N/2] is silu(a·gateᵀ)·(a·upᵀ), the SwiGLU MLP's activation (the
  // packing pairs each gate group with its up group; N/2 a multiple of 8).
  int swiglu;
  int f16;  // the packed scales are float16 (ei_q4_pack's f16)
  // norm: a is first normalised per row, a·gamma/rms(a) (RMSNorm), when
  // gamma [K] is set; with skip [M, K], a+skip is, and that sum goes to
  // sum [M, K]. eps is added to the mean square.
  const float *gamma, *skip;
  float* sum;
  float eps;
  int64_t M, N, K, nb, groups;
  // Activations quantised per block of 32 (ei_q4_quantize fills them): the
  // codes in their natural order, the block's scale, and zp·Σcodes, the
  // weights' zero point's share (zp = 8 for int4, 128 for int8).
  int8_t* qa;   // [M, nb, 32]
  float* sa;    // [M, nb]
  int32_t* za;  // [M, nb]
  // Work split (ei_q4_items sets them): the activation rows a tile takes,
  // the row tiles, chunk in groups, and the variant the split is for.
  int64_t tile_rows, row_tiles, col_chunks, chunk;
  const void* impl;
  // Batches handed to the thread pool (ei_q4_plan sets them): items, the
  // batch count, and the threads seen running them (a bit each). A decode
  // step's product on a pool of T ≥ 2 threads is T batches, `regions`:
  // batch r is region r of the items, in pieces of `piece` items (of
  // `pieces` in all), which the thread running it claims from the front
  // and a thread done with its own region from the back; claim[r] holds
  // region r's next front piece (low 32 bits) and its end (high 32 bits).
  size_t items, batches, piece, pieces, runs;
  int regions;
  uint64_t seen;
  // timed: ei_q4_batch adds each batch's wall time, on whichever thread
  // runs it, to busy_ns (ops.c's kernel timing).
  int timed;
  int64_t busy_ns;
  struct {
    _Alignas(64) uint64_t v;  // a line each: the owner's claims stay in its cache
  } claim[EI_Q4_REGIONS];
  // best, when set: the index of each row's largest output to best [M],
  // as pkg/vec's Argmax picks it (the first of equals; NaNs never; with no
  // number above −Inf the first −Inf, else 0) — found by each batch (each
  // run of pieces a thread took, when split by regions: `runs` of them)
  // over its outputs while they are in its thread's cache, each one's in a
  // slot of best_v/best_i [slots, M] (ei_q4_best_bind), and the slots
  // reduced by ei_q4_best, the lowest column among equals (not with
  // swiglu).
  int64_t* best;
  float* best_v;
  int32_t* best_i;
} ei_q4_job;

// ei_q4_packed_size is the bytes ei_q4_pack writes for N weight rows of nb
// blocks; ei_q4_pack writes them (out 64-byte aligned), for swiglu in the
// pairing that option needs, the scales as float16 where f16 (only when
// ei_q4_f16_exact says every one of them is a float16 exactly).
int ei_q4_f16_exact(const float* scales, size_t n);
size_t ei_q4_packed_size(int bits, int f16, int64_t N, int64_t nb);
void ei_q4_pack(int bits, int f16, int swiglu, const uint8_t* b, const float* scales, int64_t N, int64_t nb,
                uint8_t* out);

// ei_q4_scratch is the bytes of scratch a job of M rows needs for qa, sa
// and za; ei_q4_bind points them into scratch (64-byte aligned).
size_t ei_q4_scratch(int64_t M, int64_t nb);
void ei_q4_bind(ei_q4_job* j, void* scratch);
// First pass: item i quantises row i of a (M items).
void ei_q4_quantize(void* j, size_t i);
// Second pass: ei_q4_items work items of the product.
size_t ei_q4_items(ei_q4_job* j);
void ei_q4_work(void* j, size_t i);
// Or the second pass in batches of work items: ei_q4_plan splits them for
// a pool of `threads` threads (0: not known) and returns how many batches
// (EI_Q4_BATCHES in order, or a decode step's one region a thread);
// ei_q4_batch(j, b) runs batch b (a pool's ParallelFor over the batches,
// one each); ei_q4_threads_seen counts the threads that ran them.
size_t ei_q4_plan(ei_q4_job* j, int threads);
void ei_q4_batch(void* j, size_t b);
int ei_q4_threads_seen(const ei_q4_job* j);
// ei_q4_best_scratch is the bytes ei_q4_best_bind points best_v and best_i
// into, for a job planned already (its batches known); ei_q4_best writes
// best once every batch has run.
size_t ei_q4_best_scratch(const ei_q4_job* j);
void ei_q4_best_bind(ei_q4_job* j, void* scratch);
void ei_q4_best(const ei_q4_job* j);

// Variants, as the attention kernel's (paged_attention.h); prefetch is
// the hint a decode step's weights are prefetched with: the CPU's choice,
// or one the caller sets (EDGEINFER_PREFETCH, read in Go).
#define EI_Q4_PREFETCH_CPU 0
#define EI_Q4_PREFETCH_T0 1
#define EI_Q4_PREFETCH_NTA 2
void ei_q4_init(unsigned off, int prefetch);
// ei_q4_prefill_rows_on (1 unless a benchmark turns it off): a prefill
// chunk's int4 product takes its variant's prefill_rows a tile where it has
// them (matmul_q4.c).
extern int ei_q4_prefill_rows_on;
// ei_q4_gemv_on (1 unless a benchmark turns it off): a product of one
// activation row runs on its variant's gemv4/gemv8 where it has them, else
// on the variant's tile (testdata/gemv_cache.c times both).
extern int ei_q4_gemv_on;
const char* ei_q4_variants(void);
const char* ei_q4_compiled(void);
const char* ei_q4_current(void);
// ei_q4_gemv says how a batch-1 product streams its weights on this CPU
// (the software prefetch distance and hint chosen at ei_q4_init).
const char* ei_q4_gemv(void);
// ei_q4_gemv_tile names the code the current variant runs a batch-1
// product on: EI_Q4_ON_TILE where it has no batch-1 product of its own.
#define EI_Q4_ON_TILE "the variant's tile"
const char* ei_q4_gemv_tile(void);
int ei_q4_use(const char* name);

#endif
