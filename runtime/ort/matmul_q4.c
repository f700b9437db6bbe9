// ai.edgeinfer.MatMulNBits: y = a · Bᵀ for int4 or int8 weights in block
// 32, the weights (and inputs) of com.microsoft.MatMulNBits with bits 4 or
// 8, block_size 32 and no zero points (code 8, or 128, is zero), so a graph
// moves between the two by the node's domain alone.
//
// Why a kernel of our own: MatMulNBits (MLAS) is where a decode step and a
// prefill chunk spend most of their time on the CPU (TestProfileDecode in
// quant gives the table). This one quantises each row of a to int8 per
// block of 32 once (ei_q4_quantize), then multiplies in integers: AVX-512
// VNNI, AVX2, NEON dot-product, or generic C, picked at load.
//
// The layout (ei_q4_pack, once when the node loads): weight rows in groups
// of eight, and per group and block the eight rows' codes interleaved four
// bytes at a time, then their eight scales. One 32-byte vector of codes so
// holds the same four elements of eight weight rows, and one broadcast of
// four activation codes meets all eight: a product of one activation row
// by eight weight rows is eight lanes of one register from the first
// multiply to the store, with no horizontal sums, and each weight vector
// taken from memory serves up to four activation rows (a tile).
//
// A group is its blocks in pairs, each pair the two blocks' codes and then
// their scales (each block's eight; group_bytes). int4 codes, 128 bytes a block: four vectors, byte
// 4c+i of vector v holding row c's elements 8v+i (low nibble) and 8v+4+i
// (high nibble), codes 0..15 as MatMulNBits has them. int8 codes, 256
// bytes: eight vectors, byte 4c+i of vector v holding row c's element 4v+i
// as a signed value (code − 128). Scales are float16 when every scale of
// the node is one exactly (quant writes them so, as GGUF's Q4_0 and Q8_0
// store theirs: a decode step then reads 18 bytes per 32 int4 weights, not
// 20), else float32.
//
// The x86 paths multiply unsigned codes by signed activations (maddubs,
// dpbusd): Σ (w−zp)·x = Σ w·x − zp·Σx, the second term per activation
// block (za). AVX2's int8 path multiplies |w| by x·sign(w) instead, since
// 255·127·2 overflows maddubs' 16-bit sums and 128·127·2 does not.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "f16.h"
#include "matmul_q4.h"
#include "now.h"

static unsigned cpu_off;  // the instruction sets switched off (cpu.h), set by ei_q4_init

static inline size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }
// at64 is p rounded up to 64 bytes: scratch's start (ei_q4_scratch and
// ei_q4_best_scratch allow for it).
static inline char* at64(void* p) { return (char*)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

// ---------------------------------------------------------------------------
// Packing the weights.

static inline size_t code_bytes(int bits) { return (size_t)EI_Q4_GROUP * EI_Q4_BLOCK * (size_t)bits / 8; }
static inline size_t scale_bytes(int f16) { return EI_Q4_GROUP * (f16 ? 2 : 4); }
// Blocks go in pairs: two blocks' codes, then their scales — one stream
// for a row of weights, 32-byte aligned throughout (a pair is 288, 320, 544
// or 576 bytes); an odd last block's pair is padded.
static inline size_t pair_bytes(int bits, int f16) { return 2 * (code_bytes(bits) + scale_bytes(f16)); }
static inline size_t group_bytes(int bits, int f16, int64_t nb) { return (size_t)((nb + 1) / 2) * pair_bytes(bits, f16); }
static inline size_t code_at(int bits, int f16, int64_t blk) {
  return (size_t)(blk >> 1) * pair_bytes(bits, f16) + (size_t)(blk & 1) * code_bytes(bits);
}
static inline size_t scale_at(int bits, int f16, int64_t blk) {
  return (size_t)(blk >> 1) * pair_bytes(bits, f16) + 2 * code_bytes(bits) + (size_t)(blk & 1) * scale_bytes(f16);
}

size_t ei_q4_packed_size(int bits, int f16, int64_t N, int64_t nb) {
  return (size_t)((N + EI_Q4_GROUP - 1) / EI_Q4_GROUP) * group_bytes(bits, f16, nb);
}

int ei_q4_f16_exact(const float* scales, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (ei_f16_to_float(ei_f16_from_float(scales[i])) != scales[i] || !isfinite(scales[i])) return 0;
  return 1;
}

// code is element e of block blk of weight row n, as MatMulNBits stores it.
static inline int code(int bits, const uint8_t* b, int64_t nb, int64_t n, int64_t blk, int e) {
  const uint8_t* p = b + (n * nb + blk) * (EI_Q4_BLOCK * bits / 8);
  return bits == 8 ? p[e] : (p[e / 2] >> (4 * (e & 1))) & 15;
}

// Rows past N (the last group's padding) are zero codes with zero scales.
// For swiglu, group 2p is gate rows 8p.., group 2p+1 the up rows N/2+8p..
void ei_q4_pack(int bits, int f16, int swiglu, const uint8_t* b, const float* scales, int64_t N, int64_t nb, uint8_t* out) {
  const int64_t groups = (N + EI_Q4_GROUP - 1) / EI_Q4_GROUP;
  memset(out, 0, ei_q4_packed_size(bits, f16, N, nb));  // the groups' padding too
  for (int64_t g = 0; g < groups; g++)
    for (int64_t blk = 0; blk < nb; blk++) {
      uint8_t* group = out + (size_t)g * group_bytes(bits, f16, nb);
      uint8_t* dst = group + code_at(bits, f16, blk);
      uint8_t* sc = group + scale_at(bits, f16, blk);
      const int64_t first = swiglu ? (g & 1) * (N / 2) + (g >> 1) * EI_Q4_GROUP : g * EI_Q4_GROUP;
      for (int c = 0; c < EI_Q4_GROUP; c++) {
        const int64_t n = first + c;
        const float s = n < N ? scales[n * nb + blk] : 0.0f;
        if (f16) {
          const uint16_t h = ei_f16_from_float(s);
          memcpy(sc + 2 * c, &h, sizeof h);
        } else {
          memcpy(sc + 4 * c, &s, sizeof s);
        }
        for (int v = 0; v < bits; v++)  // code_bytes / 32 vectors
          for (int i = 0; i < 4; i++) {
            uint8_t* d = dst + 32 * v + 4 * c + i;
            if (bits == 8)
              *d = (uint8_t)(int8_t)((n < N ? code(8, b, nb, n, blk, 4 * v + i) : 128) - 128);
            else if (n < N)
              *d = (uint8_t)(code(4, b, nb, n, blk, 8 * v + i) | code(4, b, nb, n, blk, 8 * v + 4 + i) << 4);
            else
              *d = 0x88;
          }
      }
    }
}

// ---------------------------------------------------------------------------
// Quantising the activations.

size_t ei_q4_scratch(int64_t M, int64_t nb) {
  return align64((size_t)(M * nb * EI_Q4_BLOCK)) + 2 * align64((size_t)(M * nb) * sizeof(float)) + 64;
}

void ei_q4_bind(ei_q4_job* j, void* scratch) {
  char* p = at64(scratch);
  j->qa = (int8_t*)p;
  p += align64((size_t)(j->M * j->nb * EI_Q4_BLOCK));
  j->sa = (float*)p;
  p += align64((size_t)(j->M * j->nb) * sizeof(float));
  j->za = (int32_t*)p;
}

static inline int zero_point(int bits) { return bits == 8 ? 128 : 8; }

// The norm in front (j->gamma set): row i of a, plus skip's row when
// given (the sum stored in j->sum), is scaled by gamma over its root mean
// square, as SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization
// do. row_norm makes the first pass (the sum, and the mean of its
// squares, summed in double); it returns 1/rms. The squares go to eight
// partial sums: one sum was a chain of K dependent additions, each
// waiting for the last, which cost a decode row more than its quantising
// (BenchmarkMatMulQ4NormRow).
static float row_norm(const ei_q4_job* j, size_t i) {
  const int64_t K = j->K;
  const float* x = j->a + (int64_t)i * K;
  if (j->skip != NULL) {
    const float* b = j->skip + (int64_t)i * K;
    float* s = j->sum + (int64_t)i * K;
    for (int64_t k = 0; k < K; k++) s[k] = x[k] + b[k];
    x = s;
  }
  double part[8] = {0};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    for (int e = 0; e < 8; e++) part[e] += (double)x[k + e] * x[k + e];
  for (; k < K; k++) part[k % 8] += (double)x[k] * x[k];
  const double ss = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  return (float)(1.0 / sqrt(ss / (double)K + (double)j->eps));
}

// block_of is block blk of row i as the product sees it: a's own 32 values
// in place, or in pad (zeros past K; normalised first under a norm).
static inline const float* block_of(const ei_q4_job* j, size_t i, int64_t blk, float inv, float* pad) {
  const int64_t K = j->K, k0 = blk * EI_Q4_BLOCK, n = K - k0 < EI_Q4_BLOCK ? K - k0 : EI_Q4_BLOCK;
  if (j->gamma == NULL) {
    const float* x = j->a + (int64_t)i * K + k0;
    if (n == EI_Q4_BLOCK) return x;
    memset(pad, 0, EI_Q4_BLOCK * sizeof(float));
    memcpy(pad, x, (size_t)n * sizeof(float));
    return pad;
  }
  const float* x = (j->skip != NULL ? j->sum : j->a) + (int64_t)i * K + k0;
  const float* g = j->gamma + k0;
  int64_t e = 0;  // the block's elements, then zeros past K (two loops: no test per element)
  for (; e < n; e++) pad[e] = x[e] * inv * g[e];
  for (; e < EI_Q4_BLOCK; e++) pad[e] = 0.0f;
  return pad;
}

// Symmetric per block: the largest magnitude maps to ±127, rounding half
// away from zero (the vector path below gives the same codes). A last
// partial block is padded with zero codes, which add nothing whatever the
// weights' padding holds.
static void quantize_generic(const ei_q4_job* j, size_t i) {
  const float inv = j->gamma != NULL ? row_norm(j, i) : 1.0f;
  const int64_t nb = j->nb;
  int8_t* q = j->qa + (int64_t)i * nb * EI_Q4_BLOCK;
  for (int64_t blk = 0; blk < nb; blk++) {
    float pad[EI_Q4_BLOCK];
    const float* x = block_of(j, i, blk, inv, pad);
    float amax = 0;
    for (int e = 0; e < EI_Q4_BLOCK; e++) amax = fabsf(x[e]) > amax ? fabsf(x[e]) : amax;
    float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int e = 0; e < EI_Q4_BLOCK; e++) {
      float v = x[e] * id;
      int c = (int)(v + (v >= 0 ? 0.5f : -0.5f));
      c = c > 127 ? 127 : c < -127 ? -127 : c;
      q[blk * EI_Q4_BLOCK + e] = (int8_t)c;
      sum += c;
    }
    j->sa[(int64_t)i * nb + blk] = d;
    j->za[(int64_t)i * nb + blk] = zero_point(j->bits) * sum;
  }
}

// ---------------------------------------------------------------------------
// Tiles: rows [m0, m0+R) of a, R ≤ 4, against groups [g0, g1).

typedef void (*tile_fn)(const ei_q4_job* j, int64_t m0, int64_t R, int64_t g0, int64_t g1);
// quantize_fn quantises row i of a, normalising it first where the job
// has a norm (j->gamma).
typedef void (*quantize_fn)(const ei_q4_job* j, size_t i);

// put8 writes one row's eight outputs of group g (fewer in a last group).
// For swiglu a gate group's (even g) wait in pend for its up group's.
static inline void put8(const ei_q4_job* j, int64_t row, int64_t g, float* v, float* pend) {
  if (j->swiglu) {
    if (!(g & 1)) {
      memcpy(pend, v, EI_Q4_GROUP * sizeof(float));
      return;
    }
    for (int c = 0; c < EI_Q4_GROUP; c++) v[c] *= pend[c] / (1.0f + expf(-pend[c]));
    g >>= 1;
  }
  const int64_t width = EI_Q4_Y(j), n0 = g * EI_Q4_GROUP, n = width - n0 < EI_Q4_GROUP ? width - n0 : EI_Q4_GROUP;
  memcpy(j->y + row * width + n0, v, (size_t)n * sizeof(float));
}

// The generic path, in signed integers (w−zp)·x.
static void tile_generic(const ei_q4_job* j, int64_t m0, int64_t R, int64_t g0, int64_t g1) {
  const int64_t nb = j->nb;
  const size_t gb = group_bytes(j->bits, j->f16, nb);
  float pend[4][EI_Q4_GROUP] = {{0}};
  for (int64_t g = g0; g < g1; g++)
    for (int64_t r = 0; r < R; r++) {
      float acc[EI_Q4_GROUP] = {0};
      const int8_t* x = j->qa + (m0 + r) * nb * EI_Q4_BLOCK;
      for (int64_t blk = 0; blk < nb; blk++) {
        const uint8_t* wb = j->w + (size_t)g * gb + code_at(j->bits, j->f16, blk);
        const uint8_t* sp = j->w + (size_t)g * gb + scale_at(j->bits, j->f16, blk);
        float sw[EI_Q4_GROUP];
        for (int c = 0; c < EI_Q4_GROUP; c++) {
          if (j->f16) {
            uint16_t h;
            memcpy(&h, sp + 2 * c, sizeof h);
            sw[c] = ei_f16_to_float(h);
          } else {
            memcpy(&sw[c], sp + 4 * c, sizeof sw[c]);
          }
        }
        const int8_t* xb = x + blk * EI_Q4_BLOCK;
        for (int c = 0; c < EI_Q4_GROUP; c++) {
          int32_t s = 0;
          if (j->bits == 8)
            for (int v = 0; v < 8; v++)
              for (int i = 0; i < 4; i++) s += (int8_t)wb[32 * v + 4 * c + i] * xb[4 * v + i];
          else
            for (int v = 0; v < 4; v++)
              for (int i = 0; i < 4; i++) {
                const uint8_t byte = wb[32 * v + 4 * c + i];
                s += ((byte & 15) - 8) * xb[8 * v + i] + ((byte >> 4) - 8) * xb[8 * v + 4 + i];
              }
          acc[c] += sw[c] * j->sa[(m0 + r) * nb + blk] * (float)s;
        }
      }
      put8(j, m0 + r, g, acc, pend[r]);
    }
}

// NAME runs TILE with a fixed R per R, so its row loops unroll, for
// weights of BITS: up to four rows (EI_BY_ROWS), six (EI_BY_ROWS6: the
// 256-bit int4 tiles in a prefill chunk, variant.prefill_rows) or eight
// (EI_BY_ROWS8: the 512-bit tile).
#define EI_ROWS(TILE, BITS, R) \
  case R:                      \
    TILE(j, m0, R, g0, g1, BITS); \
    break;
// EI_BY_ROWS_OF: the dispatcher, CASES the fixed R below MAX.
#define EI_BY_ROWS_OF(NAME, TILE, ATTR, BITS, CASES, MAX)                                   \
  ATTR static void NAME(const ei_q4_job* j, int64_t m0, int64_t R, int64_t g0, int64_t g1) { \
    switch (R) {                                                                            \
      CASES                                                                                 \
      default: TILE(j, m0, MAX, g0, g1, BITS);                                              \
    }                                                                                       \
  }
#define EI_ROWS3(TILE, BITS) EI_ROWS(TILE, BITS, 1) EI_ROWS(TILE, BITS, 2) EI_ROWS(TILE, BITS, 3)
#define EI_BY_ROWS(NAME, TILE, ATTR, BITS) EI_BY_ROWS_OF(NAME, TILE, ATTR, BITS, EI_ROWS3(TILE, BITS), 4)
#define EI_BY_ROWS6(NAME, TILE, ATTR, BITS) \
  EI_BY_ROWS_OF(NAME, TILE, ATTR, BITS, EI_ROWS3(TILE, BITS) EI_ROWS(TILE, BITS, 4) EI_ROWS(TILE, BITS, 5), 6)
#define EI_BY_ROWS8(NAME, TILE, ATTR, BITS)                                                       \
  EI_BY_ROWS_OF(NAME, TILE, ATTR, BITS,                                                           \
                EI_ROWS3(TILE, BITS) EI_ROWS(TILE, BITS, 4) EI_ROWS(TILE, BITS, 5) EI_ROWS(TILE, BITS, 6) \
                    EI_ROWS(TILE, BITS, 7),                                                       \
                8)

#if defined(__x86_64__) && defined(__GNUC__)
#define EI_Q4_X86 1
#include <cpuid.h>
#include <immintrin.h>

#define EI_AVX2 __attribute__((target("avx2,fma,f16c")))
#define EI_INLINE static inline __attribute__((always_inline))

// The 256-bit VNNI tiles come twice: VEX-encoded for AVX-VNNI (Intel's
// client cores from Alder Lake, Zen 5), EVEX for AVX-512 VL, whose 512-bit
// variant runs a last odd group with them (Zen 4 and Ice Lake have
// AVX-512 VNNI but not AVX-VNNI).
#ifndef EI_Q4_EMULATE_VNNI
#define EI_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define EI_DPBUSD _mm256_dpbusd_avx_epi32
#define EI_EVEX __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512dq,avx512bw,avx512vnni")))
#define EI_Q4_512 1
#else
// Tests only (testdata/matmul_emulated.c, TestKernelMatMulQ4VNNIEmulated):
// the 256-bit VNNI paths built for AVX2 with dpbusd — four u8·s8 products
// summed into each 32-bit lane, exactly — in AVX2, so that a CPU without
// VNNI runs their arithmetic (the 512-bit variant is left out).
#define EI_VNNI EI_AVX2
EI_AVX2 EI_INLINE __m256i EI_DPBUSD(__m256i acc, __m256i u, __m256i s) {
  const __m256i even = _mm256_set1_epi16(0x00FF);
  __m256i ue = _mm256_and_si256(u, even), uo = _mm256_srli_epi16(u, 8);
  __m256i se = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8), so = _mm256_srai_epi16(s, 8);
  return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(ue, se), _mm256_madd_epi16(uo, so)));
}
#endif

// ahead prefetches the weights a distance past a block's codes, the
// bytes of blocks blocks (a block's share of its pair each, rounded up to
// lines: gemv_pair takes a pair at a time), when the
// product is a decode step's (M ≤ 8) and the CPU gains from it: then the
// kernel streams each weight once from memory. The distance: ahead1 for
// one row, EI_Q4_AHEAD_ROWS for two to eight, whose longer arithmetic per
// block lets more lines be in flight (each of the 512-bit tile's two
// streams: ahead2). A prefill chunk reads each weight
// chunk from the cache many times and gains nothing from it.
//
// ahead1 is chosen per microarchitecture at load (ei_q4_init; reported by
// ei_q4_gemv), by BenchmarkGEMVShare's program built with each EI_Q4_AHEAD
// and alternated over synthetic-1b's weights from DRAM. On the Xeon (family
// 6 model 167) gemv_pair reads more of the bus at 2 KiB than at 4 or 8 KiB
// or with none; there 2 KiB first made a single-thread GEMV 1.3–1.5×
// faster, its hardware prefetchers alone leaving the bus idle between
// blocks, and batch 8 gained from 4 KiB over 2. On Zen 5 (family 26), where
// the bus gives ~70 GB/s, gemv_pair — a third less arithmetic per byte than
// the 256-bit tile — reads well short of it at 2 KiB and ~0.95 of it at 4
// or 8 KiB; where it gives ~40 GB/s every distance, none included, is
// within the rounds' spread: 8 KiB. CPUs not measured keep the Xeon's.
#ifndef EI_Q4_AHEAD
#define EI_Q4_AHEAD 2048
#endif
#ifndef EI_Q4_AHEAD_ROWS
#define EI_Q4_AHEAD_ROWS 4096
#endif
//
// nta (the hint, chosen with the distance unless the caller of
// ei_q4_init sets it) prefetches the weights non-temporally: a decode step
// streams each weight once, and lines brought in as any others push out
// of the second- and last-level caches what the step reads again — ONNX
// Runtime's executor between the nodes, the KV blocks, the activations —
// which the next node then reads from memory. On Zen 5 the hint
// shortened the bare step's time outside the products and its attention
// at 1B (the step with them) and at 110m in int8, left 110m in int4 and a
// model the last-level cache holds (synthetic-50m) where they were, and
// batch 8 no slower: BenchmarkStepSplit in runtime/engine (b1-rest-µs,
// b1-attention-µs, b1-step-share), run with EDGEINFER_PREFETCH=t0 and
// =nta alternated. Elsewhere it is not chosen unmeasured: on Intel's cores
// the hint keeps lines out of the last-level cache, which a model it
// could hold would then read from memory every step.
static int ahead1 = EI_Q4_AHEAD, nta = 0;
EI_AVX2 EI_INLINE void ahead(const ei_q4_job* j, const uint8_t* wb, const int bits, const int blocks) {
  if (j->M > EI_Q4_DECODE_ROWS) return;
  const int d = j->M == 1 ? ahead1 : EI_Q4_AHEAD_ROWS;
  if (d == 0) return;
  const uint8_t* p = wb + d;
  const size_t bytes = ((size_t)blocks * (code_bytes(bits) + scale_bytes(j->f16)) + 63) & ~(size_t)63;
  if (nta)
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char*)p + o, _MM_HINT_NTA);
  else
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char*)p + o, _MM_HINT_T0);
}

// scales8 is one block's eight weight scales, float16 or float32.
EI_AVX2 EI_INLINE __m256 scales8(int f16, const uint8_t* p) {
  return f16 ? _mm256_cvtph_ps(_mm_load_si128((const __m128i*)p)) : _mm256_load_ps((const float*)p);
}

EI_AVX2 EI_INLINE __m256i bcast4(const int8_t* p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// exp_avx2 is Cephes' expf in eight lanes: 2^n·e^r with n = round(x·log2 e),
// r = x − n·ln 2 in two parts, e^r by its degree-6 polynomial (about one
// ulp), x clamped to where 2^n stays a normal float.
EI_AVX2 EI_INLINE __m256 exp_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  __m256i pow2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(e, _mm256_castsi256_ps(pow2));
}

// store8 writes one row's eight outputs of group g (fewer in a last group).
// For swiglu a gate group's (even g) wait in *pend for its up group's.
EI_AVX2 EI_INLINE void store8(const ei_q4_job* j, int64_t row, int64_t g, __m256 v, __m256* pend) {
  if (j->swiglu) {
    if (!(g & 1)) {
      *pend = v;
      return;
    }
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 gate = *pend, sig = _mm256_div_ps(one, _mm256_add_ps(one, exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), gate))));
    v = _mm256_mul_ps(v, _mm256_mul_ps(gate, sig));
    g >>= 1;
  }
  const int64_t width = EI_Q4_Y(j);
  float* y = j->y + row * width + g * EI_Q4_GROUP;
  if (g * EI_Q4_GROUP + EI_Q4_GROUP <= width) {
    _mm256_storeu_ps(y, v);
  } else {
    float t[EI_Q4_GROUP];
    _mm256_storeu_ps(t, v);
    memcpy(y, t, (size_t)(width - g * EI_Q4_GROUP) * sizeof(float));
  }
}

// unpack8 is a block's codes as eight vectors c[k] of unsigned codes,
// c[k] meeting each row's activation codes 4k..4k+3: int4's four vectors'
// low and high nibbles in turn (0..15, zero point 8), or int8's eight
// vectors back to w + 128 (zero point 128).
EI_AVX2 EI_INLINE void unpack8(const int bits, const uint8_t* wb, __m256i* c) {
  for (int v = 0; v < bits; v++) {
    const __m256i raw = _mm256_load_si256((const __m256i*)(wb + 32 * v));
    if (bits == 8) {
      c[v] = _mm256_xor_si256(raw, _mm256_set1_epi8((char)0x80));
    } else {
      c[2 * v] = _mm256_and_si256(raw, _mm256_set1_epi8(0x0F));
      c[2 * v + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0x0F));
    }
  }
}

// EI_TILE defines NAME(j, m0, R, g0, g1, bits): a block's codes unpacked
// once into eight registers for the tile's rows (row by row, so the
// compiler keeps them there: a loop over the vectors outside the rows
// spilled its partial sums), then DOT(c, x), one row's block of dot
// products Σ_k c[k]·x[4k..4k+3] in eight 32-bit lanes, less the zero
// point's share za. R is at most six (EI_BY_ROWS6).
#define EI_TILE(NAME, ATTR, DOT)                                                               \
  ATTR EI_INLINE void NAME(const ei_q4_job* j, int64_t m0, const int R, int64_t g0, int64_t g1, const int bits) { \
    const int64_t nb = j->nb;                                                                           \
    __m256 pend[6];                                                                                     \
    for (int r = 0; r < R; r++) pend[r] = _mm256_setzero_ps();                                          \
    for (int64_t g = g0; g < g1; g++) {                                                                 \
      __m256 acc[6];                                                                                    \
      for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();                                         \
      const uint8_t* wg = j->w + (size_t)g * group_bytes(bits, j->f16, nb);                             \
      for (int64_t blk = 0; blk < nb; blk++) {                                                          \
        const uint8_t* wb = wg + code_at(bits, j->f16, blk);                                            \
        ahead(j, wb, bits, 1);                                                                          \
        __m256i c[8];                                                                                   \
        unpack8(bits, wb, c);                                                                           \
        const __m256 sw = scales8(j->f16, wg + scale_at(bits, j->f16, blk));                            \
        for (int r = 0; r < R; r++) {                                                                   \
          const int64_t at = (m0 + r) * nb + blk;                                                       \
          const __m256i p = _mm256_sub_epi32(DOT(c, j->qa + at * EI_Q4_BLOCK), _mm256_set1_epi32(j->za[at])); \
          acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(sw, _mm256_set1_ps(j->sa[at])), acc[r]); \
        }                                                                                               \
      }                                                                                                 \
      for (int r = 0; r < R; r++) store8(j, m0 + r, g, acc[r], &pend[r]);                               \
    }                                                                                                   \
  }

// AVX2, int4: eight maddubs summed in 16 bits (each pair is at most
// 2·15·127, eight of them 30,480), one madd to 32. The codes 4k..4k+3 of
// the activations' block x are broadcast where they are used, or (xv set:
// EI_GEMV256) already spread, xv[k]; the tiles' code is as it was before
// the two shared it (a copy taking xv built up front ran the prefill tile
// 1–3 % slower: BenchmarkMatMulQ4PrefillRows, AVX2).
EI_AVX2 EI_INLINE __m256i sum_avx2_q4(const __m256i* c, const __m256i* xv, const int8_t* x) {
#define EI_XK(k) (xv != NULL ? xv[k] : bcast4(x + 4 * (k)))
  // pairs first: a chain of four adds, not eight (measured ~6 % faster)
  __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(c[0], EI_XK(0)), _mm256_maddubs_epi16(c[1], EI_XK(1)));
  for (int k = 2; k < 8; k += 2)
    s = _mm256_add_epi16(s, _mm256_add_epi16(_mm256_maddubs_epi16(c[k], EI_XK(k)), _mm256_maddubs_epi16(c[k + 1], EI_XK(k + 1))));
#undef EI_XK
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}
EI_AVX2 EI_INLINE __m256i dot_avx2_q4(const __m256i* c, const int8_t* x) { return sum_avx2_q4(c, NULL, x); }
EI_TILE(avx2_q4_tile, EI_AVX2, dot_avx2_q4)

// AVX2, int8: |w| by x·sign(w) on the signed codes (255·127·2 would
// overflow maddubs' 16-bit sums, 128·127·2 does not), each maddubs widened
// to 32 bits on its own; no zero point. A tile of its own: each vector's
// |w| is taken once for all the tile's rows, which unpack8's eight
// registers would leave to every row (measured 6–10 % slower).
EI_AVX2 EI_INLINE void avx2_q8_tile(const ei_q4_job* j, int64_t m0, const int R, int64_t g0, int64_t g1, const int bits) {
  const int64_t nb = j->nb;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 pend[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t g = g0; g < g1; g++) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const uint8_t* wg = j->w + (size_t)g * group_bytes(bits, j->f16, nb);
    for (int64_t blk = 0; blk < nb; blk++) {
      const uint8_t* wb = wg + code_at(bits, j->f16, blk);
      ahead(j, wb, bits, 1);
      __m256i s[4];
      for (int v = 0; v < 8; v++) {
        __m256i w = _mm256_load_si256((const __m256i*)(wb + 32 * v)), aw = _mm256_abs_epi8(w);
        for (int r = 0; r < R; r++) {
          const int8_t* x = j->qa + ((m0 + r) * nb + blk) * EI_Q4_BLOCK + 4 * v;
          __m256i t = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(x), w)), ones);
          s[r] = v ? _mm256_add_epi32(s[r], t) : t;
        }
      }
      const __m256 sw = scales8(j->f16, wg + scale_at(bits, j->f16, blk));
      for (int r = 0; r < R; r++) {
        const int64_t at = (m0 + r) * nb + blk;
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r]), _mm256_mul_ps(sw, _mm256_set1_ps(j->sa[at])), acc[r]);
      }
    }
    for (int r = 0; r < R; r++) store8(j, m0 + r, g, acc[r], &pend[r]);
  }
}

// VNNI: dpbusd sums four products into 32 bits directly, in two chains
// (even and odd k) so that its latency does not serialise a row; int8
// codes go back to unsigned (w + 128) with the zero point's share
// subtracted, as int4's (w, zero point 8).
#define EI_DOT_VNNI(NAME, ATTR, DP)                                                       \
  ATTR EI_INLINE __m256i NAME(const __m256i* c, const int8_t* x) {                       \
    __m256i s0 = DP(_mm256_setzero_si256(), c[0], bcast4(x)), s1 = DP(_mm256_setzero_si256(), c[1], bcast4(x + 4)); \
    for (int k = 2; k < 8; k += 2) s0 = DP(s0, c[k], bcast4(x + 4 * k)), s1 = DP(s1, c[k + 1], bcast4(x + 4 * k + 4)); \
    return _mm256_add_epi32(s0, s1);                                                      \
  }
EI_DOT_VNNI(dot_vnni, EI_VNNI, EI_DPBUSD)
EI_TILE(vnni_tile, EI_VNNI, dot_vnni)

// EI_GEMV256 defines NAME_q4 and NAME_q8, the 256-bit variants' product
// of one activation row (a batch-1 decode step): the tile's arithmetic
// with R = 1 less the work the tile shares between rows. Why a loop of its
// own: where the caches hold the weights (a model the last-level cache
// holds, or a board whose bus outruns its cores), a batch-1 step is bound
// by the product's instructions, and the tile at one row spent nearly as
// many finding a block (code_at's multiply, the scales' width tested per
// block) as multiplying it: AVX-VNNI then ran well behind gemv_pair and
// behind AVX2 (BenchmarkMatMulQ4GEMV: each variant in one thread against
// the fastest). Here the scales' width is a constant of each copy
// (NAME_of), the weights are walked a pair at a time (two blocks' codes, then their
// scales), the block's 32 activation codes are two 16-byte broadcasts
// whose dwords are spread by in-lane shuffles rather than eight loads,
// and VNNI multiplies int4's high nibbles where they lie (gemv_pair's
// shift once a block). int8 on AVX2 keeps the tile's |w| by x·sign(w),
// with signed codes and no zero point (ZP).
#define EI_GEMV256(NAME, ATTR, VNNI, DP)                                                                        \
  ATTR EI_INLINE __m256i NAME##_dot(const uint8_t* wb, const int8_t* x, const int bits) {                        \
    const __m256i xl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)x));                         \
    const __m256i xh = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(x + 16)));                  \
    const __m256i xv[8] = {_mm256_shuffle_epi32(xl, 0x00), _mm256_shuffle_epi32(xl, 0x55),                      \
                           _mm256_shuffle_epi32(xl, 0xAA), _mm256_shuffle_epi32(xl, 0xFF),                      \
                           _mm256_shuffle_epi32(xh, 0x00), _mm256_shuffle_epi32(xh, 0x55),                      \
                           _mm256_shuffle_epi32(xh, 0xAA), _mm256_shuffle_epi32(xh, 0xFF)};                     \
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();                                           \
    if (bits == 4 && VNNI) {  /* s1: the high nibbles at 16 times their value, as in gemv_pair */               \
      for (int v = 0; v < 4; v++) {                                                                             \
        const __m256i raw = _mm256_load_si256((const __m256i*)(wb + 32 * v));                                   \
        s0 = DP(s0, _mm256_and_si256(raw, _mm256_set1_epi8(0x0F)), xv[2 * v]);                                  \
        s1 = DP(s1, _mm256_and_si256(raw, _mm256_set1_epi8((char)0xF0)), xv[2 * v + 1]);                        \
      }                                                                                                         \
      return _mm256_add_epi32(s0, _mm256_srai_epi32(s1, 4));                                                    \
    }                                                                                                           \
    if (bits == 4) {                                                                                            \
      __m256i c[8];                                                                                             \
      unpack8(4, wb, c);                                                                                        \
      return sum_avx2_q4(c, xv, NULL);                                                                          \
    }                                                                                                           \
    for (int v = 0; v < 8; v++) {  /* two chains, even and odd v */                                          \
      const __m256i w = _mm256_load_si256((const __m256i*)(wb + 32 * v));                                      \
      __m256i* s = v & 1 ? &s1 : &s0;                                                                           \
      if (VNNI)                                                                                                 \
        *s = DP(*s, _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)), xv[v]);                                  \
      else                                                                                                      \
        *s = _mm256_add_epi32(*s, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xv[v], w)), _mm256_set1_epi16(1))); \
    }                                                                                                           \
    return _mm256_add_epi32(s0, s1);                                                                            \
  }                                                                                                             \
  /* one block into acc: its dot product less the zero point's share (ZP: the codes are unsigned), by its scales */ \
  ATTR EI_INLINE __m256 NAME##_block(__m256 acc, const uint8_t* wb, const uint8_t* sc, const int8_t* x, int32_t za,   \
                                     float sa, const int bits, const int f16) {                                    \
    const int ZP = bits == 4 || VNNI;                                                                           \
    __m256i p = NAME##_dot(wb, x, bits);                                                                        \
    if (ZP) p = _mm256_sub_epi32(p, _mm256_set1_epi32(za));                                                     \
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(scales8(f16, sc), _mm256_set1_ps(sa)), acc);    \
  }                                                                                                             \
  ATTR EI_INLINE void NAME##_of(const ei_q4_job* j, int64_t m0, int64_t g0, int64_t g1, const int bits, const int f16) { \
    const int64_t nb = j->nb;                                                                                   \
    const size_t gb = group_bytes(bits, f16, nb), cb = code_bytes(bits), pb = pair_bytes(bits, f16), sb = scale_bytes(f16); \
    const int8_t* xa = j->qa + m0 * nb * EI_Q4_BLOCK;                                                           \
    const float* sa = j->sa + m0 * nb;                                                                          \
    const int32_t* za = j->za + m0 * nb;                                                                        \
    __m256 pend = _mm256_setzero_ps();                                                                          \
    for (int64_t g = g0; g < g1; g++) {                                                                         \
      const uint8_t* wb = j->w + (size_t)g * gb;                                                                \
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                                            \
      int64_t blk = 0;                                                                                          \
      for (; blk + 1 < nb; blk += 2, wb += pb) {                                                                \
        ahead(j, wb, bits, 1); /* a block at a time: a pair at once streamed slower (BenchmarkMatMulQ4GEMV, 50m int8) */ \
        acc0 = NAME##_block(acc0, wb, wb + 2 * cb, xa + blk * EI_Q4_BLOCK, za[blk], sa[blk], bits, f16);         \
        ahead(j, wb + cb, bits, 1);                                                                             \
        acc1 = NAME##_block(acc1, wb + cb, wb + 2 * cb + sb, xa + (blk + 1) * EI_Q4_BLOCK, za[blk + 1], sa[blk + 1], bits, f16); \
      }                                                                                                         \
      if (blk < nb) /* the odd last block: its pair's first half */                                            \
        acc0 = NAME##_block(acc0, wb, wb + 2 * cb, xa + blk * EI_Q4_BLOCK, za[blk], sa[blk], bits, f16);         \
      store8(j, m0, g, _mm256_add_ps(acc0, acc1), &pend);                                                       \
    }                                                                                                           \
  }                                                                                                             \
  ATTR static void NAME##_q4(const ei_q4_job* j, int64_t m0, int64_t R, int64_t g0, int64_t g1) {              \
    (void)R;                                                                                                    \
    if (j->f16) NAME##_of(j, m0, g0, g1, 4, 1);                                                                 \
    else NAME##_of(j, m0, g0, g1, 4, 0);                                                                        \
  }                                                                                                             \
  ATTR static void NAME##_q8(const ei_q4_job* j, int64_t m0, int64_t R, int64_t g0, int64_t g1) {              \
    (void)R;                                                                                                    \
    if (j->f16) NAME##_of(j, m0, g0, g1, 8, 1);                                                                 \
    else NAME##_of(j, m0, g0, g1, 8, 0);                                                                        \
  }
EI_AVX2 EI_INLINE __m256i no_dpbusd(__m256i acc, __m256i u, __m256i s) { return (void)u, (void)s, acc; }  // AVX2 takes no VNNI branch
EI_GEMV256(gemv_avx2, EI_AVX2, 0, no_dpbusd)
EI_GEMV256(gemv_vnni, EI_VNNI, 1, EI_DPBUSD)

EI_BY_ROWS6(avx2_q4, avx2_q4_tile, EI_AVX2, 4)
EI_BY_ROWS(avx2_q8, avx2_q8_tile, EI_AVX2, 8)
EI_BY_ROWS6(vnni_q4, vnni_tile, EI_VNNI, 4)
EI_BY_ROWS(vnni_q8, vnni_tile, EI_VNNI, 8)

#ifdef EI_Q4_512
EI_DOT_VNNI(dot_evex, EI_EVEX, _mm256_dpbusd_epi32)
EI_TILE(evex_tile, EI_EVEX, dot_evex)
EI_BY_ROWS(evex_q4, evex_tile, EI_EVEX, 4)
EI_BY_ROWS(evex_q8, evex_tile, EI_EVEX, 8)

// AVX-512: two groups (sixteen weight rows) in one 512-bit register, group
// g in its low half and g+1 in its high half, so one broadcast of four
// activation codes (dpbusd's {1to16} operand, no shuffle) meets sixteen
// rows, and the 32 registers hold a tile of up to eight activation rows:
// a prefill chunk unpacks each block's codes once per eight rows, not
// four. For swiglu the pair is a gate group and its up group, the halves
// store8 already pairs. A chunk's odd last group runs on the 256-bit tile.
// A product of one activation row does not (the variant's gemv4/gemv8,
// gemv_pair below): there the weights come from memory once, and reading
// two groups at once is two streams a group apart, which the prefetchers
// served worse than one on Zen 5 (BenchmarkGEMVShare).
#define EI_512 EI_EVEX
EI_512 EI_INLINE __m512i load2(const uint8_t* p0, const uint8_t* p1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256((const __m256i*)p0)),
                            _mm256_load_si256((const __m256i*)p1), 1);
}
EI_512 EI_INLINE __m512 scales16(int f16, const uint8_t* p0, const uint8_t* p1) {
  if (f16)
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_load_si128((const __m128i*)p0)),
                                                   _mm_load_si128((const __m128i*)p1), 1));
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_load_ps((const float*)p0)), _mm256_load_ps((const float*)p1), 1);
}
EI_512 EI_INLINE __m512i bcast16(const int8_t* p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}
// unpack16 is unpack8 of two groups' blocks at once.
EI_512 EI_INLINE void unpack16(const int bits, const uint8_t* b0, const uint8_t* b1, __m512i* c) {
  for (int v = 0; v < bits; v++) {
    const __m512i raw = load2(b0 + 32 * v, b1 + 32 * v);
    if (bits == 8) {
      c[v] = _mm512_xor_si512(raw, _mm512_set1_epi8((char)0x80));
    } else {
      c[2 * v] = _mm512_and_si512(raw, _mm512_set1_epi8(0x0F));
      c[2 * v + 1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), _mm512_set1_epi8(0x0F));
    }
  }
}
EI_512 EI_INLINE void store16(const ei_q4_job* j, int64_t row, int64_t g, __m512 v) {
  __m256 pend = _mm256_setzero_ps();
  store8(j, row, g, _mm512_castps512_ps256(v), &pend);
  store8(j, row, g + 1, _mm512_extractf32x8_ps(v, 1), &pend);
}

// ahead2 is ahead for the tile's two streams, groups g and g+1 one group
// (gb bytes) apart, at offset `at` of a block in them: ahead's distance
// (EI_Q4_AHEAD_ROWS: the tile runs two to eight rows) is taken within each
// group, and past a group's end it lands where the stream goes next, the
// same offset in the next pair of groups (g+2 and g+3). Taken from each
// block's address as one stream's (ahead), it landed in the other stream's
// group, on lines that stream was reading or had read, or two pairs on,
// and a batch-8 product ran far below the bus
// (BenchmarkGEMVShare at 8 rows; runtime/engine's BenchmarkStepSplit, the
// products' time in a batch-8 step).
EI_512 EI_INLINE void ahead2(const ei_q4_job* j, const uint8_t* b0, size_t at, size_t gb, const int bits) {
  const uint8_t* from = at + EI_Q4_AHEAD_ROWS < gb ? b0 : b0 + gb;
  ahead(j, from, bits, 1), ahead(j, from + gb, bits, 1);
}

EI_512 EI_INLINE void avx512_tile(const ei_q4_job* j, int64_t m0, const int R, int64_t g0, int64_t g1, const int bits) {
  const int64_t nb = j->nb;
  const size_t gb = group_bytes(bits, j->f16, nb);
  int64_t g = g0;
  for (; g + 1 < g1; g += 2) {
    __m512 acc[8];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const uint8_t *w0 = j->w + (size_t)g * gb, *w1 = w0 + gb;
    for (int64_t blk = 0; blk < nb; blk++) {
      const uint8_t *b0 = w0 + code_at(bits, j->f16, blk), *b1 = w1 + code_at(bits, j->f16, blk);
      ahead2(j, b0, (size_t)(b0 - w0), gb, bits);
      __m512i c[8];
      unpack16(bits, b0, b1, c);
      const __m512 sw = scales16(j->f16, w0 + scale_at(bits, j->f16, blk), w1 + scale_at(bits, j->f16, blk));
      for (int r = 0; r < R; r++) {
        const int64_t at = (m0 + r) * nb + blk;
        const int8_t* x = j->qa + at * EI_Q4_BLOCK;
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[0], bcast16(x));
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[1], bcast16(x + 4));
        for (int k = 2; k < 8; k += 2)
          s0 = _mm512_dpbusd_epi32(s0, c[k], bcast16(x + 4 * k)), s1 = _mm512_dpbusd_epi32(s1, c[k + 1], bcast16(x + 4 * k + 4));
        const __m512i p = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(j->za[at]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sw, _mm512_set1_ps(j->sa[at])), acc[r]);
      }
    }
    for (int r = 0; r < R; r++) store16(j, m0 + r, g, acc[r]);
  }
  for (int64_t t = 0; g < g1 && t < R; t += 4)  // the odd last group, four rows at a time
    (bits == 4 ? evex_q4 : evex_q8)(j, m0 + t, R - t < 4 ? R - t : 4, g, g1);
}

// gemv_pair: one activation row (a batch-1 decode step), a group's two
// blocks of a pair (adjacent in the packing) in one 512-bit register: block
// 2p in the low half, 2p+1 in the high. Each instruction does twice the
// 256-bit tile's work while the weights are still read as one stream. Why
// it matters: on Zen 5 the 256-bit tile over weights already in the cache
// ran at about the speed DRAM delivers them, so a decode step was bound by
// its arithmetic as much as by memory; this one does the same work in
// about two thirds of the instructions (BenchmarkGEMVShare: the kernel's
// share of the read bandwidth, alternated with the read loop). The
// activation codes of both blocks are one 64-byte load; each k's pair of
// dwords is spread over its half by a permute. Spreading them once per
// product into a buffer instead ran faster over weights in the cache but
// slower from memory: the buffer's loads, twice the weights' bytes, took
// the first-level cache's bandwidth from the weight stream. int4's high
// nibbles are multiplied where they lie, at sixteen times their value,
// and the sum shifted back once (a shift and a mask less per vector).
EI_512 EI_INLINE void gemv_pair(const ei_q4_job* j, int64_t m0, const int R, int64_t g0, int64_t g1, const int bits) {
  (void)R;
  const int64_t nb = j->nb, pairs = nb / 2;
  const size_t gb = group_bytes(bits, j->f16, nb), cb = code_bytes(bits);
  __m512i idx[8];
  for (int k = 0; k < 8; k++)
    idx[k] = _mm512_setr_epi32(k, k, k, k, k, k, k, k, 8 + k, 8 + k, 8 + k, 8 + k, 8 + k, 8 + k, 8 + k, 8 + k);
  const __m512i idx2 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const int8_t* xa = j->qa + m0 * nb * EI_Q4_BLOCK;
  const float* sa = j->sa + m0 * nb;
  const int32_t* za = j->za + m0 * nb;
  __m256 pend = _mm256_setzero_ps();
  for (int64_t g = g0; g < g1; g++) {
    const uint8_t* wg = j->w + (size_t)g * gb;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; p++) {
      const uint8_t* wb = wg + code_at(bits, j->f16, 2 * p);
      ahead(j, wb, bits, 2);  // the whole pair
      const __m512i x = _mm512_loadu_si512((const void*)(xa + 2 * p * EI_Q4_BLOCK));
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      for (int v = 0; v < bits; v++) {
        const __m512i raw = load2(wb + 32 * v, wb + cb + 32 * v);
        if (bits == 8) {
          const __m512i c = _mm512_xor_si512(raw, _mm512_set1_epi8((char)0x80));
          if (v & 1) s1 = _mm512_dpbusd_epi32(s1, c, _mm512_permutexvar_epi32(idx[v], x));
          else s0 = _mm512_dpbusd_epi32(s0, c, _mm512_permutexvar_epi32(idx[v], x));
        } else {  // s1 takes the high nibbles where they lie: 16 times their value
          s0 = _mm512_dpbusd_epi32(s0, _mm512_and_si512(raw, _mm512_set1_epi8(0x0F)), _mm512_permutexvar_epi32(idx[2 * v], x));
          s1 = _mm512_dpbusd_epi32(s1, _mm512_and_si512(raw, _mm512_set1_epi8((char)0xF0)), _mm512_permutexvar_epi32(idx[2 * v + 1], x));
        }
      }
      if (bits == 4) s1 = _mm512_srai_epi32(s1, 4);  // exact: every product is a multiple of 16
      const __m512i z = _mm512_permutexvar_epi32(idx2, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i*)(za + 2 * p))));
      const __m512 a = _mm512_permutexvar_ps(idx2, _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i*)(sa + 2 * p)))));
      const uint8_t* sp = wg + scale_at(bits, j->f16, 2 * p);
      const __m512 sw = j->f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)sp)) : _mm512_loadu_ps((const float*)sp);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_add_epi32(s0, s1), z)), _mm512_mul_ps(sw, a), acc);
    }
    __m256 r = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    if (nb & 1) {  // the odd last block, on the 256-bit tile's arithmetic
      const int64_t blk = nb - 1;
      __m256i c[8];
      unpack8(bits, wg + code_at(bits, j->f16, blk), c);
      const __m256i d = _mm256_sub_epi32(dot_evex(c, xa + blk * EI_Q4_BLOCK), _mm256_set1_epi32(za[blk]));
      r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(scales8(j->f16, wg + scale_at(bits, j->f16, blk)), _mm256_set1_ps(sa[blk])), r);
    }
    store8(j, m0, g, r, &pend);
  }
}
EI_512 static void gemv_pair_q4(const ei_q4_job* j, int64_t m0, int64_t R, int64_t g0, int64_t g1) { gemv_pair(j, m0, (int)R, g0, g1, 4); }
EI_512 static void gemv_pair_q8(const ei_q4_job* j, int64_t m0, int64_t R, int64_t g0, int64_t g1) { gemv_pair(j, m0, (int)R, g0, g1, 8); }

EI_BY_ROWS8(avx512_q4, avx512_tile, EI_512, 4)
EI_BY_ROWS8(avx512_q8, avx512_tile, EI_512, 8)
#endif

// The AVX2 quantiser: the generic one's arithmetic, eight lanes at a time
// (the same float operations in the same order, so the same codes).
// row_norm_avx2 is row_norm's pass eight elements at a time: the skip's
// sum stored, the squares summed in double in two vectors of four, lane e
// row_norm's partial sum e.
EI_AVX2 static float row_norm_avx2(const ei_q4_job* j, size_t i) {
  const int64_t K = j->K;
  const float* x = j->a + (int64_t)i * K;
  const float* b = j->skip != NULL ? j->skip + (int64_t)i * K : NULL;
  float* sum = b != NULL ? j->sum + (int64_t)i * K : NULL;
  __m256d s0 = _mm256_setzero_pd(), s1 = s0;
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 v = _mm256_loadu_ps(x + k);
    if (b != NULL) v = _mm256_add_ps(v, _mm256_loadu_ps(b + k)), _mm256_storeu_ps(sum + k, v);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    s0 = _mm256_fmadd_pd(lo, lo, s0), s1 = _mm256_fmadd_pd(hi, hi, s1);
  }
  if (b != NULL) {
    for (int64_t t = k; t < K; t++) sum[t] = x[t] + b[t];
    x = sum;
  }
  // the tail into its partial sums and row_norm's order of additions: the
  // squares of floats are exact in double, so the two give the same bits
  double part[8];
  _mm256_storeu_pd(part, s0), _mm256_storeu_pd(part + 4, s1);
  for (; k < K; k++) part[k % 8] += (double)x[k] * x[k];
  const double ss = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  return (float)(1.0 / sqrt(ss / (double)K + (double)j->eps));
}

// quantize_avx2 normalises each full block in registers (x·inv·gamma, as
// block_of does into its pad), one pass over the row after the norm's.
// BenchmarkMatMulQ4NormRow times a decode row's norm and quantising.
EI_AVX2 static void quantize_avx2(const ei_q4_job* j, size_t i) {
  const float inv = j->gamma != NULL ? row_norm_avx2(j, i) : 1.0f;
  const int64_t nb = j->nb, K = j->K;
  int8_t* q = j->qa + (int64_t)i * nb * EI_Q4_BLOCK;
  const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), vinv = _mm256_set1_ps(inv);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int zp = zero_point(j->bits);
  const float* row = (j->skip != NULL ? j->sum : j->a) + (int64_t)i * K;
  for (int64_t blk = 0; blk < nb; blk++) {
    __m256 v[4];
    if (j->gamma != NULL && (blk + 1) * EI_Q4_BLOCK <= K) {
      const float *x = row + blk * EI_Q4_BLOCK, *g = j->gamma + blk * EI_Q4_BLOCK;
      for (int k = 0; k < 4; k++) v[k] = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vinv), _mm256_loadu_ps(g + 8 * k));
    } else {
      float pad[EI_Q4_BLOCK];
      const float* x = block_of(j, i, blk, inv, pad);
      for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
    }
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h), d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    __m256i c[4], sum = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
      __m256 t = _mm256_mul_ps(v[k], mul);
      t = _mm256_add_ps(t, _mm256_or_ps(_mm256_and_ps(t, sign), half));
      c[k] = _mm256_cvttps_epi32(t);
      sum = _mm256_add_epi32(sum, c[k]);
    }
    __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    _mm256_storeu_si256((__m256i*)(q + blk * EI_Q4_BLOCK), _mm256_permutevar8x32_epi32(packed, order));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    j->sa[(int64_t)i * nb + blk] = d;
    j->za[(int64_t)i * nb + blk] = zp * _mm_cvtsi128_si32(s);
  }
}

static int has_avx2(void) {
  return !(cpu_off & EI_CPU_AVX2) && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}
#ifndef EI_Q4_EMULATE_VNNI
static int has_vnni(void) { return has_avx2() && !(cpu_off & EI_CPU_AVXVNNI) && __builtin_cpu_supports("avxvnni"); }
static int has_avx512(void) {
  return has_avx2() && !(cpu_off & (EI_CPU_AVX512 | EI_CPU_AVX512VNNI)) && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
}
#else
static int has_vnni(void) { return has_avx2(); }
#endif
#endif

#if defined(__aarch64__) && defined(__GNUC__) && defined(__linux__)
#define EI_Q4_DOTPROD 1
#include <arm_neon.h>
#include <sys/auxv.h>

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#define EI_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))

// The NEON variant: a tile of up to four activation rows by a group of
// eight weight rows, each vector of codes four weight rows (a group's
// block is two halves, rows 0..3 and 4..7). The block's 32 activation
// codes of a row stay in two registers, and each dot product takes its
// four codes from a lane of one of them (SDOT by element), where the tile
// before it loaded and broadcast four codes for every vector of weights;
// int4's codes are multiplied as they lie (0..15 fit a signed byte) and
// the zero point's share taken once a block (za), as the x86 tiles do;
// the rows, the bits and the scales' width are constants of each copy, so
// that every loop unrolls. TestKernelNEONInstructions counts the
// instructions a block: no Arm core has been at hand to time it.
//
// One activation row (a batch-1 decode step) runs the same code, its
// block's dot products in four chains rather than one, so that their
// latency is not what a little in-order core (Cortex-A55) waits on, and
// both blocks of a pair in one pass; with more rows, the rows' chains are
// independent already. It needs no batch-1 product of its own (the x86
// variants' gemv4 and gemv8).
//
// No software prefetch by default: no Arm core has been measured here.
// Built with EI_Q4_AHEAD_NEON=<bytes>, a batch-1 product prefetches that
// far ahead (for streaming, PRFM PLDL1STRM): testdata/gemv_share.c built
// so on a board measures a distance against the hardware prefetchers
// alone (BenchmarkGEMVShare runs there too).
#ifndef EI_Q4_AHEAD_NEON
#define EI_Q4_AHEAD_NEON 0
#endif
#define EI_NEON_INLINE static inline __attribute__((always_inline, target("arch=armv8.2-a+dotprod")))

// neon_codes is half h (rows 4h..4h+3) of block wb's codes as eight
// vectors of signed bytes, vector k holding elements 4k..4k+3 of each of
// the four rows. int4's vector v holds elements 8v..8v+3 in its low
// nibbles and 8v+4..8v+7 in its high ones; int8's vector v elements
// 4v..4v+3.
EI_NEON_INLINE void neon_codes(const uint8_t* wb, int h, const int bits, int8x16_t c[8]) {
  const uint8_t* p = wb + 16 * h;
  if (bits == 4) {
    for (int v = 0; v < 4; v++) {
      const uint8x16_t raw = vld1q_u8(p + 32 * v);
      c[2 * v] = vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0F)));
      c[2 * v + 1] = vreinterpretq_s8_u8(vshrq_n_u8(raw, 4));
    }
  } else {
    for (int v = 0; v < 8; v++) c[v] = vld1q_s8((const int8_t*)p + 32 * v);
  }
}

// neon_dot8 is s plus the four rows' sums of c against activation codes
// xl (elements 0..15) and xh (16..31), in `chains` (1 or 4) chains of dot
// products.
EI_NEON_INLINE int32x4_t neon_dot8(int32x4_t s0, const int8x16_t c[8], int8x16_t xl, int8x16_t xh, const int chains) {
  int32x4_t s[4] = {s0, vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
  const int k = chains == 4;  // with four chains, chain i takes c[i] and c[i+4]
  s[0] = vdotq_laneq_s32(s[0], c[0], xl, 0);
  s[1 * k] = vdotq_laneq_s32(s[1 * k], c[1], xl, 1);
  s[2 * k] = vdotq_laneq_s32(s[2 * k], c[2], xl, 2);
  s[3 * k] = vdotq_laneq_s32(s[3 * k], c[3], xl, 3);
  s[0] = vdotq_laneq_s32(s[0], c[4], xh, 0);
  s[1 * k] = vdotq_laneq_s32(s[1 * k], c[5], xh, 1);
  s[2 * k] = vdotq_laneq_s32(s[2 * k], c[6], xh, 2);
  s[3 * k] = vdotq_laneq_s32(s[3 * k], c[7], xh, 3);
  return k ? vaddq_s32(vaddq_s32(s[0], s[1]), vaddq_s32(s[2], s[3])) : s[0];
}

// neon_block adds block blk's products (its codes at wb, its scales at sc)
// for rows m0..m0+R-1 to acc. An int4 row's sums start at minus the zero
// point's share (int8's codes are signed as packed).
EI_NEON_INLINE void neon_block(float32x4_t acc[4][2], const ei_q4_job* j, int64_t m0, const int R, const uint8_t* wb,
                               const uint8_t* sc, int64_t blk, const int bits, const int f16) {
  const int chains = R == 1 ? 4 : 1;
  if (EI_Q4_AHEAD_NEON > 0 && R == 1) __builtin_prefetch(wb + EI_Q4_AHEAD_NEON, 0, 0);
  int8x16_t xl[4], xh[4];
  float sa[4];
  int32_t za[4];
  for (int r = 0; r < R; r++) {
    const int64_t at = (m0 + r) * j->nb + blk;
    xl[r] = vld1q_s8(j->qa + at * EI_Q4_BLOCK), xh[r] = vld1q_s8(j->qa + at * EI_Q4_BLOCK + 16);
    sa[r] = j->sa[at], za[r] = bits == 4 ? -j->za[at] : 0;
  }
  for (int h = 0; h < 2; h++) {
    int8x16_t c[8];
    neon_codes(wb, h, bits, c);
    const float32x4_t sw = f16 ? vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t*)sc + 4 * h)))
                               : vld1q_f32((const float*)sc + 4 * h);
    for (int r = 0; r < R; r++) {
      const int32x4_t sum = neon_dot8(vdupq_n_s32(za[r]), c, xl[r], xh[r], chains);
      acc[r][h] = vfmaq_f32(acc[r][h], vcvtq_f32_s32(sum), vmulq_n_f32(sw, sa[r]));
    }
  }
}

// neon_of runs rows m0..m0+R-1 of a against groups g0..g1-1, the weights
// walked in the pairs' order.
EI_NEON_INLINE void neon_of(const ei_q4_job* j, int64_t m0, const int R, int64_t g0, int64_t g1, const int bits, const int f16) {
  const int64_t nb = j->nb;
  const size_t gb = group_bytes(bits, f16, nb), cb = code_bytes(bits), pb = pair_bytes(bits, f16), sb = scale_bytes(f16);
  float pend[4][EI_Q4_GROUP] = {{0}};
  for (int64_t g = g0; g < g1; g++) {
    const uint8_t* wb = j->w + (size_t)g * gb;
    float32x4_t acc[4][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = vdupq_n_f32(0);
    int64_t blk = 0;
    if (R <= 2) {  // both blocks of a pair in one pass: with more rows, more spills than gains
      for (; blk + 1 < nb; blk += 2, wb += pb) {
        neon_block(acc, j, m0, R, wb, wb + 2 * cb, blk, bits, f16);
        neon_block(acc, j, m0, R, wb + cb, wb + 2 * cb + sb, blk + 1, bits, f16);
      }
      if (blk < nb) neon_block(acc, j, m0, R, wb, wb + 2 * cb, blk, bits, f16);  // the odd last block: its pair's first half
    } else {
      for (; blk < nb; blk++) neon_block(acc, j, m0, R, wb + code_at(bits, f16, blk), wb + scale_at(bits, f16, blk), blk, bits, f16);
    }
    for (int r = 0; r < R; r++) {
      float t[EI_Q4_GROUP];
      vst1q_f32(t, acc[r][0]);
      vst1q_f32(t + 4, acc[r][1]);
      put8(j, m0 + r, g, t, pend[r]);
    }
  }
}

// neon_rows is neon_of with the rows and the scales' width as constants.
EI_NEON_INLINE void neon_rows(const ei_q4_job* j, int64_t m0, int64_t R, int64_t g0, int64_t g1, const int bits) {
#define EI_NEON_R(n) \
  case n:            \
    if (j->f16) neon_of(j, m0, n, g0, g1, bits, 1); \
    else neon_of(j, m0, n, g0, g1, bits, 0);        \
    return;
  switch (R) {
    EI_NEON_R(1) EI_NEON_R(2) EI_NEON_R(3) EI_NEON_R(4)
  }
#undef EI_NEON_R
}
EI_DOTPROD static void tile_dotprod_q4(const ei_q4_job* j, int64_t m0, int64_t R, int64_t g0, int64_t g1) { neon_rows(j, m0, R, g0, g1, 4); }
EI_DOTPROD static void tile_dotprod_q8(const ei_q4_job* j, int64_t m0, int64_t R, int64_t g0, int64_t g1) { neon_rows(j, m0, R, g0, g1, 8); }
static int has_dotprod(void) { return !(cpu_off & EI_CPU_DOTPROD) && (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; }
#endif

// The row argmax beside the product (ei_q4_job's best). A sampler's
// greedy pick reads every logit of its row once more after the product:
// at batch 8 a 32k vocabulary is 1 MiB of outputs, half of them in the
// other core's cache, read back by one thread. Here each batch's thread
// looks at the outputs it has just written, still in its own cache, and
// the step hands the sampler an index a row (BenchmarkBatchScaling's
// sampling phase in runtime/engine is the read this removes).
//
// A variant's best_fn finds the largest of y[0..n) above *v (NaNs never:
// a comparison with one is false), the first of equals, and sets *v and
// its index base+k in *at; nothing changes when none is above *v.
typedef void (*best_fn)(const float* y, int64_t n, int64_t base, float* v, int32_t* at);

static void best_in_generic(const float* y, int64_t n, int64_t base, float* v, int32_t* at) {
  float m = *v;
  int64_t k0 = -1;
  for (int64_t k = 0; k < n; k++)
    if (y[k] > m) m = y[k], k0 = k;
  if (k0 >= 0) *v = m, *at = (int32_t)(base + k0);
}

#ifdef EI_Q4_DOTPROD
// The NEON variant's: best_in_avx2's two passes four lanes at a time; the
// lanes keep y where y > m (a compare and a select: FMAXNM would take a
// signalling NaN), as the comparison above.
static void best_in_neon(const float* y, int64_t n, int64_t base, float* v, int32_t* at) {
  float32x4_t m4 = vdupq_n_f32(*v);
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const float32x4_t x = vld1q_f32(y + k);
    m4 = vbslq_f32(vcgtq_f32(x, m4), x, m4);
  }
  float lanes[4], m = *v;
  vst1q_f32(lanes, m4);
  for (int c = 0; c < 4; c++)
    if (lanes[c] > m) m = lanes[c];
  for (; k < n; k++)
    if (y[k] > m) m = y[k];
  if (!(m > *v)) return;
  const float32x4_t want = vdupq_n_f32(m);
  for (k = 0; k + 4 <= n; k += 4)
    if (vmaxvq_u32(vceqq_f32(vld1q_f32(y + k), want)) != 0) break;
  for (; k < n; k++)
    if (y[k] == m) {
      *v = m, *at = (int32_t)(base + k);
      return;
    }
}
#endif

#ifdef EI_Q4_X86
// The x86 variants': the maximum eight lanes at a time, then the first
// index holding it, eight at a time too; maxps(y, m) is m where y is NaN,
// as the comparison above.
EI_AVX2 static void best_in_avx2(const float* y, int64_t n, int64_t base, float* v, int32_t* at) {
  __m256 m8 = _mm256_set1_ps(*v);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) m8 = _mm256_max_ps(_mm256_loadu_ps(y + k), m8);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  float m = _mm_cvtss_f32(h);
  for (; k < n; k++)
    if (y[k] > m) m = y[k];
  if (!(m > *v)) return;
  const __m256 want = _mm256_set1_ps(m);
  for (k = 0; k + 8 <= n; k += 8) {
    const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(y + k), want, _CMP_EQ_OQ));
    if (eq != 0) {
      *v = m, *at = (int32_t)(base + k + __builtin_ctz((unsigned)eq));
      return;
    }
  }
  for (; k < n; k++)
    if (y[k] == m) {
      *v = m, *at = (int32_t)(base + k);
      return;
    }
}
#endif

// ---------------------------------------------------------------------------
// Variants (best last) and work items.

typedef struct {
  const char* name;
  tile_fn q4, q8;
  quantize_fn quantize;
  int (*runs)(void);
  int rows;  // the most activation rows a tile takes
  // prefill_rows, when set, is the rows a tile takes in a prefill chunk's
  // int4 product (M > 8): the 256-bit tiles have the registers for six
  // rows' sums beside a block's eight code vectors, and each more row
  // shares the unpacking and the scales (BenchmarkMatMulQ4PrefillRows:
  // AVX2 and AVX-VNNI, in one thread, against four rows). int4 only: the
  // q8 dispatchers stop at four rows (the AVX2 int8 tile keeps four rows'
  // sums), so six there would leave rows unwritten.
  int prefill_rows;
  // gemv4 and gemv8, when set, take a product of one activation row (a
  // batch-1 decode step) in place of q4 and q8.
  tile_fn gemv4, gemv8;
  const char* gemv_tile;  // gemv4/gemv8's name, when set (ei_q4_gemv_tile)
  best_fn best;           // the job's best, a row's run of outputs at a time
} variant;

static int always(void) { return 1; }

static const variant variants[] = {
    {"generic", tile_generic, tile_generic, quantize_generic, always, 4, 0, NULL, NULL, NULL, best_in_generic},
#ifdef EI_Q4_X86
    {"avx2", avx2_q4, avx2_q8, quantize_avx2, has_avx2, 4, 6, gemv_avx2_q4, gemv_avx2_q8, "256-bit block pairs", best_in_avx2},
    {"avxvnni", vnni_q4, vnni_q8, quantize_avx2, has_vnni, 4, 6, gemv_vnni_q4, gemv_vnni_q8, "256-bit block pairs", best_in_avx2},
#endif
#ifdef EI_Q4_512
    {"avx512vnni", avx512_q4, avx512_q8, quantize_avx2, has_avx512, 8, 0, gemv_pair_q4, gemv_pair_q8, "512-bit block pairs",
     best_in_avx2},
#endif
#ifdef EI_Q4_DOTPROD
    {"neon-dotprod", tile_dotprod_q4, tile_dotprod_q8, quantize_generic, has_dotprod, 4, 0, NULL, NULL, NULL, best_in_neon},
#endif
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static const variant* current = &variants[0];
static char supported[256], compiled[256];
int ei_q4_prefill_rows_on = 1;
int ei_q4_gemv_on = 1;

// gemv says how a batch-1 product streams its weights here (ei_q4_gemv);
// the x86 tiles prefetch, the NEON tile only where built to.
static char gemv[128] = "hardware prefetch only";

// amd_family is CPUID's display family (base plus extended) of an AMD
// CPU, 0 for any other: the key ahead1 is chosen by.
#ifdef EI_Q4_X86
static unsigned amd_family(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541 /* "Auth" */) return 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  unsigned base = (a >> 8) & 0xF;
  return base == 0xF ? base + ((a >> 20) & 0xFF) : base;
}
#endif

void ei_q4_init(unsigned off, int prefetch) {
  cpu_off = off;
#ifdef EI_Q4_X86
  __builtin_cpu_init();
  // Zen 5 (family 26): 8 KiB ahead, non-temporal (see ahead); every other
  // x86 CPU the Xeon's distance and an ordinary prefetch.
  const int zen5 = amd_family() == 26;
  if (zen5) ahead1 = 8192;
  nta = prefetch == EI_Q4_PREFETCH_CPU ? zen5 : prefetch == EI_Q4_PREFETCH_NTA;
  if (ahead1 > 0)
    snprintf(gemv, sizeof gemv, "software prefetch %d bytes ahead%s%s", ahead1, nta ? ", non-temporal" : "",
             zen5 && prefetch == EI_Q4_PREFETCH_CPU ? " (AMD family 26)" : "");
#else
  (void)prefetch;  // only the x86 tiles choose a hint
#if defined(EI_Q4_DOTPROD) && EI_Q4_AHEAD_NEON > 0
  snprintf(gemv, sizeof gemv, "software prefetch %d bytes ahead (built with EI_Q4_AHEAD_NEON)", EI_Q4_AHEAD_NEON);
#endif
#endif
  size_t n = 0, c = 0;
  for (size_t i = 0; i < N_VARIANTS; i++) {
    c += (size_t)snprintf(compiled + c, sizeof compiled - c, "%s%s", c ? "," : "", variants[i].name);
    if (!variants[i].runs()) continue;
    __atomic_store_n(&current, &variants[i], __ATOMIC_RELEASE);
    n += (size_t)snprintf(supported + n, sizeof supported - n, "%s%s", n ? "," : "", variants[i].name);
  }
}

const char* ei_q4_variants(void) { return supported; }
const char* ei_q4_gemv(void) { return gemv; }
const char* ei_q4_gemv_tile(void) {
  const variant* v = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
  return v->gemv_tile != NULL ? v->gemv_tile : EI_Q4_ON_TILE;
}
const char* ei_q4_compiled(void) { return compiled; }
const char* ei_q4_current(void) { return __atomic_load_n(&current, __ATOMIC_ACQUIRE)->name; }

int ei_q4_use(const char* name) {
  for (size_t i = 0; i < N_VARIANTS; i++)
    if (strcmp(variants[i].name, name) == 0 && variants[i].runs()) {
      __atomic_store_n(&current, &variants[i], __ATOMIC_RELEASE);
      return 0;
    }
  return -1;
}

void ei_q4_quantize(void* p, size_t i) {
  const ei_q4_job* j = p;
  __atomic_load_n(&current, __ATOMIC_ACQUIRE)->quantize(j, i);
}

// Rows of a per tile (the variant's), and groups per work item: a decode
// step's few rows split over the weights finely enough for every thread; a
// prefill chunk's items keep one chunk of weights (64 rows of ~K/2 bytes)
// in the first-level cache while a thread runs its tiles of a over it.
// The job keeps the variant it was split for.
size_t ei_q4_items(ei_q4_job* j) {
  const variant* v = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
  j->impl = v;
  j->groups = (j->N + EI_Q4_GROUP - 1) / EI_Q4_GROUP;
  j->tile_rows = v->rows;
  if (j->M > EI_Q4_DECODE_ROWS && j->bits == 4 && v->prefill_rows > 0 && ei_q4_prefill_rows_on) j->tile_rows = v->prefill_rows;
  j->row_tiles = (j->M + j->tile_rows - 1) / j->tile_rows;
  j->chunk = j->row_tiles == 1 ? 2 : 8;
  j->col_chunks = (j->groups + j->chunk - 1) / j->chunk;
  return (size_t)(j->row_tiles * j->col_chunks);
}

// tile_of is the job's tile: its variant's for its bits, or the batch-1
// product's where the variant has one.
static tile_fn tile_of(const ei_q4_job* j) {
  const variant* v = j->impl;
  if (j->M == 1 && v->gemv4 != NULL && ei_q4_gemv_on) return j->bits == 8 ? v->gemv8 : v->gemv4;
  return j->bits == 8 ? v->q8 : v->q4;
}

// best_of_batch sets slot at's best of each row over the outputs of items
// lo..hi-1, once they are all written: the items are consecutive, so for
// every row the columns they cover are one run (the chunks of its row tile
// among them), and its best is the first of equals in it; ei_q4_best takes
// the largest over the slots, the lowest column among equals, so the
// slots may be filled in any order. One run a row rather than one a work
// item: a decode step's items are 16 columns, and a call per item and row
// cost the head as much as the sampler's read it replaces
// (BenchmarkMatMulQ4Best); the run's outputs are still in its thread's
// second-level cache.
static void best_of_batch(const ei_q4_job* j, size_t lo, size_t hi, size_t at) {
  const variant* v = j->impl;
  const int64_t width = j->chunk * EI_Q4_GROUP;
  for (int64_t t = 0; t < j->row_tiles; t++) {
    // chunks c with lo <= c·row_tiles + t < hi
    const int64_t c0 = ((int64_t)lo - t + j->row_tiles - 1) / j->row_tiles;          // ≥ 0: lo ≥ 0, t < row_tiles
    const int64_t c1 = (int64_t)hi - 1 - t < 0 ? -1 : ((int64_t)hi - 1 - t) / j->row_tiles;  // the last, inclusive
    const int64_t m0 = t * j->tile_rows, R = j->M - m0 < j->tile_rows ? j->M - m0 : j->tile_rows;
    const int64_t n0 = c0 * width, n1 = (c1 + 1) * width < j->N ? (c1 + 1) * width : j->N;
    for (int64_t r = m0; r < m0 + R; r++) {
      float* bv = &j->best_v[(int64_t)at * j->M + r];
      int32_t* bi = &j->best_i[(int64_t)at * j->M + r];
      *bv = -INFINITY, *bi = -1;
      if (c1 >= c0 && n1 > n0) v->best(j->y + r * j->N + n0, n1 - n0, n0, bv, bi);
    }
  }
}

// slots is how many runs of outputs may have a best of their own: a
// batch's, or a run of pieces one thread took (at most one a piece).
static size_t slots(const ei_q4_job* j) { return j->regions ? j->pieces : j->batches; }

size_t ei_q4_best_scratch(const ei_q4_job* j) {
  return 2 * align64(slots(j) * (size_t)j->M * sizeof(float)) + 64;
}

void ei_q4_best_bind(ei_q4_job* j, void* scratch) {
  char* p = at64(scratch);
  j->best_v = (float*)p;
  j->best_i = (int32_t*)(p + align64(slots(j) * (size_t)j->M * sizeof(float)));
}

void ei_q4_best(const ei_q4_job* j) {
  for (int64_t r = 0; r < j->M; r++) {
    float v = -INFINITY;
    int32_t at = -1;
    const size_t used = j->regions ? __atomic_load_n(&j->runs, __ATOMIC_RELAXED) : j->batches;
    for (size_t b = 0; b < used; b++) {
      const float bv = j->best_v[(int64_t)b * j->M + r];
      const int32_t bi = j->best_i[(int64_t)b * j->M + r];  // -1: nothing above −Inf in the slot's run
      if (bi >= 0 && (at < 0 || bv > v || (bv == v && bi < at))) v = bv, at = bi;
    }
    if (at < 0) {  // no number above −Inf: the first −Inf, else 0
      at = 0;
      for (int64_t k = 0; k < j->N; k++)
        if (j->y[r * j->N + k] == -INFINITY) {
          at = (int32_t)k;
          break;
        }
    }
    j->best[r] = at;
  }
}

// Batches. A decode step's product (M ≤ 8) reads its weights once, from
// memory: each thread should stream one run of them from start to end,
// and the threads should finish together. ONNX Runtime's pool hands a
// ParallelFor's batches out from one shard of consecutive indices a
// thread (its loop counter), stealing from another shard only when its
// own is done; a layout built for a pool that deals batches in turn made
// each thread there read two runs by turns, and the last batch, 1/16 of
// the product, left a thread idle at the end of most products. So a pool
// of T ≥ 2 threads gets T batches, one region of the items each, claimed
// in pieces of ~EI_Q4_PIECE bytes (an item, two groups, at least): the
// thread that takes region r claims from its front; a thread done with
// its own takes pieces from the back of the others', so that the owner's
// stream runs on unbroken and the threads end within about a piece of
// each other (BenchmarkStepSplit in runtime/engine logs the products'
// time against the bandwidth). Which thread takes which region does not
// matter. A prefill chunk's product (its weights read from the cache many
// times) keeps EI_Q4_BATCHES batches in order, as does a pool not yet
// seen (threads 0).
#ifndef EI_Q4_PIECE
#define EI_Q4_PIECE 32768
#endif

size_t ei_q4_plan(ei_q4_job* j, int threads) {
  j->items = ei_q4_items(j);
  j->seen = 0, j->regions = 0, j->runs = 0;
  if (j->M <= EI_Q4_DECODE_ROWS && threads >= 2 && threads <= EI_Q4_REGIONS) {
    const size_t item = (size_t)j->chunk * group_bytes(j->bits, j->f16, j->nb);
    const size_t piece = item < EI_Q4_PIECE ? EI_Q4_PIECE / item : 1, pieces = (j->items + piece - 1) / piece;
    if (pieces >= (size_t)threads) {
      j->piece = piece, j->pieces = pieces, j->regions = threads, j->batches = (size_t)threads;
      for (int r = 0; r < threads; r++)
        j->claim[r].v = (uint64_t)(pieces * (size_t)r / (size_t)threads) |
                        (uint64_t)(pieces * (size_t)(r + 1) / (size_t)threads) << 32;
      return j->batches;
    }
  }
  j->batches = EI_Q4_BATCHES < j->items ? EI_Q4_BATCHES : j->items;
  return j->batches;
}

// claim takes region r's next piece from its front, or from its back (a
// thread done with its own), into *piece; 0 when the region is done.
static int claim(ei_q4_job* j, size_t r, int back, size_t* piece) {
  uint64_t s = __atomic_load_n(&j->claim[r].v, __ATOMIC_RELAXED);
  for (;;) {
    const uint32_t front = (uint32_t)s, end = (uint32_t)(s >> 32);
    if (front >= end) return 0;
    if (__atomic_compare_exchange_n(&j->claim[r].v, &s, back ? s - (1ull << 32) : s + 1, 1, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      *piece = back ? end - 1 : front;
      return 1;
    }
  }
}

// run_items runs items lo..hi-1. Where one row tile takes every row (a
// decode step's), the items are consecutive groups: one call of the tile
// over them all, so that its prefetch runs on across their boundaries.
static void run_items(ei_q4_job* j, size_t lo, size_t hi) {
  if (j->row_tiles == 1 && hi > lo) {
    const int64_t g1 = (int64_t)hi * j->chunk;
    tile_of(j)(j, 0, j->M, (int64_t)lo * j->chunk, g1 < j->groups ? g1 : j->groups);
  } else
    for (size_t i = lo; i < hi; i++) ei_q4_work(j, i);
}

// best_of_pieces is best_of_batch over pieces lo..hi-1, in the next slot.
static void best_of_pieces(ei_q4_job* j, size_t lo, size_t hi) {
  if (j->best == NULL || hi <= lo) return;
  const size_t slot = __atomic_fetch_add(&j->runs, 1, __ATOMIC_RELAXED);
  best_of_batch(j, lo * j->piece, hi * j->piece < j->items ? hi * j->piece : j->items, slot);
}

static _Thread_local int thread_id = -1;
static int thread_ids;

static void batch(ei_q4_job* j, size_t b);

void ei_q4_batch(void* p, size_t b) {
  ei_q4_job* j = p;
  if (thread_id < 0) thread_id = __atomic_fetch_add(&thread_ids, 1, __ATOMIC_RELAXED);
  const uint64_t bit = 1ull << (thread_id & 63);
  if (!(__atomic_load_n(&j->seen, __ATOMIC_RELAXED) & bit)) __atomic_fetch_or(&j->seen, bit, __ATOMIC_RELAXED);
  if (!j->timed) {
    batch(j, b);
    return;
  }
  const int64_t t0 = ei_now_ns();
  batch(j, b);
  __atomic_fetch_add(&j->busy_ns, ei_now_ns() - t0, __ATOMIC_RELAXED);
}

// batch runs batch b: a range of items in order, or region b's pieces and
// then the others' from their backs.
static void batch(ei_q4_job* j, size_t b) {
  if (j->regions == 0) {
    const size_t lo = j->items * b / j->batches, hi = j->items * (b + 1) / j->batches;
    run_items(j, lo, hi);
    if (j->best != NULL) best_of_batch(j, lo, hi, b);
    return;
  }
  // The pieces this thread ran last as one run, [run_lo, run_hi): its own
  // region's from the front, then each other region's from the back. Their
  // best is found once a run ends, over all its outputs at once (a call a
  // piece and row cost a batch-8 step's head more than its arithmetic).
  size_t piece, run_lo = 0, run_hi = 0;
  for (int d = 0; d < j->regions; d++) {
    const size_t r = (b + (size_t)d) % (size_t)j->regions;
    while (claim(j, r, d > 0, &piece)) {
      const size_t lo = piece * j->piece;
      run_items(j, lo, lo + j->piece < j->items ? lo + j->piece : j->items);
      if (run_hi > run_lo && (piece == run_hi || piece + 1 == run_lo)) {
        run_lo = piece < run_lo ? piece : run_lo, run_hi = piece + 1 > run_hi ? piece + 1 : run_hi;
        continue;
      }
      best_of_pieces(j, run_lo, run_hi);
      run_lo = piece, run_hi = piece + 1;
    }
  }
  best_of_pieces(j, run_lo, run_hi);
}

int ei_q4_threads_seen(const ei_q4_job* j) { return __builtin_popcountll(__atomic_load_n(&j->seen, __ATOMIC_RELAXED)); }

// Item i: column chunk i / row_tiles, row tile i % row_tiles, so that the
// consecutive items a thread takes share their weights.
void ei_q4_work(void* p, size_t i) {
  const ei_q4_job* j = p;
  int64_t c = (int64_t)i / j->row_tiles, t = (int64_t)i % j->row_tiles;
  int64_t m0 = t * j->tile_rows, R = j->M - m0 < j->tile_rows ? j->M - m0 : j->tile_rows;
  int64_t g0 = c * j->chunk, g1 = g0 + j->chunk < j->groups ? g0 + j->chunk : j->groups;
  tile_of(j)(j, m0, R, g0, g1);
}
