// ai.edgeinfer.MatMulNBits: y = a · Bᵀ for int4 weights in block 32, the
// weights (and inputs) of com.microsoft.MatMulNBits with bits 4, block_size
// 32 and no zero points (code 8 is zero), so a graph moves between the two
// by the node's domain alone.
//
// Why a kernel of our own: MatMulNBits (MLAS) is where a decode step and a
// prefill chunk spend most of their time on the CPU (TestProfileDecode in
// quant gives the table), and its int8-activation path (accuracy_level 4)
// leaves the memory bus idle at batch 1. This one quantises each row of a
// to int8 per block of 32 once (ei_q4_quantize), then takes each weight
// block from memory once for up to four rows of a (a decode step's row, or
// a tile of a prefill chunk), with the dot products in integers: AVX-512
// VNNI, AVX2, NEON dot-product, or generic C, picked at load.
//
// Weights are read in MatMulNBits' own layout, in place: low nibble = even
// element. The activation codes are stored in that order (the block's even
// elements, then its odd ones), so a block's 16 bytes unpack into 32 codes
// that line up with them without shuffles, and the session holds no second
// copy of the weights.
//
// Per output and block: Σ (w−8)·x = Σ w·x − 8·Σx. The x86 paths multiply
// unsigned codes w ∈ [0, 15] by signed x (maddubs, dpbusd) and subtract the
// zero point's share, 8·scale·Σx, precomputed per activation block (za).

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matmul_q4.h"

// ---------------------------------------------------------------------------
// Quantising the activations.

static inline size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

// ei_q4_codes finds block blk's even and odd codes in a row of nb blocks
// (the layout is described at ei_q4_quantize).
static inline void ei_q4_codes(const int8_t* row, int64_t nb, int64_t blk, int8_t** even, int8_t** odd) {
  const int8_t* pair = row + (blk & ~(int64_t)1) * EI_Q4_BLOCK;
  if ((blk | 1) < nb) {
    *even = (int8_t*)pair + (blk & 1) * 16;
    *odd = *even + 32;
  } else {
    *even = (int8_t*)pair;
    *odd = *even + 16;
  }
}

size_t ei_q4_scratch(int64_t M, int64_t nb) {
  return align64((size_t)(M * nb * EI_Q4_BLOCK)) + 2 * align64((size_t)(M * nb) * sizeof(float)) +
         align64((size_t)(M * (nb / 2) * 8) * sizeof(float)) + 64;
}

void ei_q4_bind(ei_q4_job* j, void* scratch) {
  char* p = (char*)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
  j->qa = (int8_t*)p;
  p += align64((size_t)(j->M * j->nb * EI_Q4_BLOCK));
  j->sa = (float*)p;
  p += align64((size_t)(j->M * j->nb) * sizeof(float));
  j->za = (float*)p;
  p += align64((size_t)(j->M * j->nb) * sizeof(float));
  j->sa8 = (float*)p;
}

// Symmetric per block: the largest magnitude maps to ±127, rounding half
// away from zero. A last partial block is padded with zero codes, which
// meet the weights' padding and add nothing.
//
// Layout of a row's codes: blocks in pairs, 64 bytes a pair — the even
// elements of both blocks, then the odd ones ([e0 e1 o0 o1], 16 bytes
// each) — so that one 32-byte load of a weight row's two consecutive
// blocks (MatMulNBits keeps a row's blocks adjacent) unpacks into the
// nibbles that meet [e0 e1] and [o0 o1]. A last unpaired block is [e o].
void ei_q4_quantize(void* p, size_t i) {
  const ei_q4_job* j = p;
  const int64_t K = j->K, nb = j->nb;
  const float* a = j->a + (int64_t)i * K;
  int8_t* row = j->qa + (int64_t)i * nb * EI_Q4_BLOCK;
  for (int64_t blk = 0; blk < nb; blk++) {
    int8_t *even, *odd;
    ei_q4_codes(row, nb, blk, &even, &odd);
    float x[EI_Q4_BLOCK] = {0};
    int64_t n = K - blk * EI_Q4_BLOCK < EI_Q4_BLOCK ? K - blk * EI_Q4_BLOCK : EI_Q4_BLOCK;
    memcpy(x, a + blk * EI_Q4_BLOCK, (size_t)n * sizeof(float));
    float amax = 0;
    for (int e = 0; e < EI_Q4_BLOCK; e++) amax = fabsf(x[e]) > amax ? fabsf(x[e]) : amax;
    float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int e = 0; e < EI_Q4_BLOCK; e++) {
      float v = x[e] * id;
      int c = (int)(v + (v >= 0 ? 0.5f : -0.5f));
      c = c > 127 ? 127 : c < -127 ? -127 : c;
      (e & 1 ? odd : even)[e / 2] = (int8_t)c;
      sum += c;
    }
    j->sa[(int64_t)i * nb + blk] = d;
    j->za[(int64_t)i * nb + blk] = 8.0f * d * (float)sum;
    if (blk % 2 == 1)
      for (int l = 0; l < 8; l++) j->sa8[((int64_t)i * (nb / 2) + blk / 2) * 8 + l] = j->sa[(int64_t)i * nb + blk - 1 + l / 4];
  }
}

// ---------------------------------------------------------------------------
// Tiles: rows [m0, m0+R) of a, R ≤ 4, against weight rows [n0, n1).

typedef void (*tile_fn)(const ei_q4_job* j, int64_t m0, int64_t R, int64_t n0, int64_t n1);

// The generic path, in signed integers (w−8)·x, vectorised by the compiler.
static void tile_generic(const ei_q4_job* j, int64_t m0, int64_t R, int64_t n0, int64_t n1) {
  const int64_t nb = j->nb;
  for (int64_t n = n0; n < n1; n++) {
    const uint8_t* w = j->b + n * nb * 16;
    const float* sw = j->scales + n * nb;
    for (int64_t r = 0; r < R; r++) {
      const int8_t* x = j->qa + (m0 + r) * nb * EI_Q4_BLOCK;
      const float* sa = j->sa + (m0 + r) * nb;
      float acc = 0;
      for (int64_t blk = 0; blk < nb; blk++) {
        const uint8_t* wb = w + blk * 16;
        int8_t *xe, *xo;
        ei_q4_codes(x, nb, blk, &xe, &xo);
        int32_t s = 0;
        for (int e = 0; e < 16; e++) s += ((wb[e] & 15) - 8) * xe[e] + ((wb[e] >> 4) - 8) * xo[e];
        acc += sw[blk] * sa[blk] * (float)s;
      }
      j->y[(m0 + r) * j->N + n] = acc;
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define EI_Q4_X86 1
#include <immintrin.h>

#define EI_AVX2 __attribute__((target("avx2,fma")))
#define EI_VNNI __attribute__((target("avx2,fma,avx512f,avx512vl,avx512vnni")))

EI_AVX2 static inline float hsum_avx2(__m256 a) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, 1)));
}

// zero_share is Σ_blk sw[blk]·za[blk], the zero point's part of one
// output: as eight lanes still to be summed, and the blocks past the last
// multiple of eight subtracted from *tail.
EI_AVX2 static inline __m256 zero_share(const float* sw, const float* za, int64_t nb, float* tail) {
  __m256 acc = _mm256_setzero_ps();
  int64_t blk = 0;
  for (; blk + 8 <= nb; blk += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(sw + blk), _mm256_loadu_ps(za + blk), acc);
  for (; blk < nb; blk++) *tail -= sw[blk] * za[blk];
  return acc;
}

// hsum4 sums each of four vectors: one row's output each.
EI_AVX2 static inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

#define EI_Q4_STEP(DOT2, BLK, A)                                                                      \
  do {                                                                                                 \
    const int64_t blk = (BLK);                                                                         \
    __m256i raw = _mm256_loadu_si256((const __m256i*)(w + blk * 16));                                  \
    __m256i lo = _mm256_and_si256(raw, low), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);     \
    __m128 s2 = _mm_castpd_ps(_mm_load_sd((const double*)(sw + blk)));                                 \
    __m256 sw8 = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(s2), spread);                        \
    for (int r = 0; r < R; r++) {                                                                      \
      const int8_t* x = j->qa + ((m0 + r) * nb + blk) * EI_Q4_BLOCK;                                   \
      __m256i p = DOT2(lo, _mm256_load_si256((const __m256i*)x), hi, _mm256_load_si256((const __m256i*)(x + 32))); \
      __m256 sc = _mm256_mul_ps(sw8, _mm256_load_ps(j->sa8 + ((m0 + r) * pairs + blk / 2) * 8));      \
      acc[r][A] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc[r][A]);                              \
    }                                                                                                  \
  } while (0)

#define EI_Q4_TILE(NAME, ATTR, DOT2)                                                                  \
  ATTR static inline __attribute__((always_inline)) void NAME##_rows(                                \
      const ei_q4_job* j, int64_t m0, const int R, int64_t n0, int64_t n1) {                         \
    const int64_t nb = j->nb, pairs = nb / 2;                                                         \
    const __m256i low = _mm256_set1_epi8(0x0F);                                                        \
    const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);                                 \
    for (int64_t n = n0; n < n1; n++) {                                                                \
      const uint8_t* w = j->b + n * nb * 16;                                                           \
      const float* sw = j->scales + n * nb;                                                            \
      __m256 acc[4][2];                                                                                \
      for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();                        \
      int64_t pr = 0;                                                                                  \
      for (; pr + 2 <= pairs; pr += 2) {                                                               \
        EI_Q4_STEP(DOT2, 2 * pr, 0);                                                                   \
        EI_Q4_STEP(DOT2, 2 * pr + 2, R == 1); /* a row of its own: a second accumulator */            \
      }                                                                                                \
      if (pr < pairs) EI_Q4_STEP(DOT2, 2 * pr, 0);                                                     \
      float tail[4] = {0, 0, 0, 0};                                                                    \
      if (nb & 1) { /* a last unpaired block: [e o] */                                                 \
        const int64_t blk = nb - 1;                                                                    \
        __m128i raw = _mm_loadu_si128((const __m128i*)(w + blk * 16));                                 \
        __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);             \
        for (int r = 0; r < R; r++) {                                                                  \
          const int64_t row = (m0 + r) * nb;                                                           \
          const int8_t* x = j->qa + (row + blk) * EI_Q4_BLOCK;                                         \
          __m256i p = DOT2(q, _mm256_load_si256((const __m256i*)x), _mm256_setzero_si256(),            \
                           _mm256_setzero_si256());                                                    \
          tail[r] = sw[blk] * j->sa[row + blk] * hsum_avx2(_mm256_cvtepi32_ps(p));                     \
        }                                                                                              \
      }                                                                                                \
      __m256 t[4];                                                                                     \
      for (int r = 0; r < 4; r++) t[r] = _mm256_setzero_ps();                                          \
      for (int r = 0; r < R; r++)                                                                      \
        t[r] = _mm256_sub_ps(_mm256_add_ps(acc[r][0], acc[r][1]), zero_share(sw, j->za + (m0 + r) * nb, nb, &tail[r])); \
      __m128 sums = hsum4(t[0], t[1], t[2], t[3]);                                                     \
      float out[4];                                                                                    \
      _mm_storeu_ps(out, sums);                                                                        \
      for (int r = 0; r < R; r++) j->y[(m0 + r) * j->N + n] = out[r] + tail[r];                        \
    }                                                                                                  \
  }                                                                                                    \
  ATTR static void NAME(const ei_q4_job* j, int64_t m0, int64_t R, int64_t n0, int64_t n1) {          \
    switch (R) {                                                                                       \
      case 1: NAME##_rows(j, m0, 1, n0, n1); break;                                                    \
      case 2: NAME##_rows(j, m0, 2, n0, n1); break;                                                    \
      case 3: NAME##_rows(j, m0, 3, n0, n1); break;                                                    \
      default: NAME##_rows(j, m0, 4, n0, n1); break;                                                   \
    }                                                                                                  \
  }

EI_AVX2 static inline __m256i dot_avx2(__m256i lo, __m256i xe, __m256i hi, __m256i xo) {
  // each maddubs pair is at most 2·15·127, so the int16 sum cannot overflow
  __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}
EI_VNNI static inline __m256i dot_vnni(__m256i lo, __m256i xe, __m256i hi, __m256i xo) {
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, xe), hi, xo);
}

EI_Q4_TILE(tile_avx2, EI_AVX2, dot_avx2)
EI_Q4_TILE(tile_vnni, EI_VNNI, dot_vnni)

static int has_avx2(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
static int has_vnni(void) {
  return has_avx2() && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}
#endif

#if defined(__aarch64__) && defined(__GNUC__) && defined(__linux__)
#define EI_Q4_DOTPROD 1
#include <arm_neon.h>
#include <sys/auxv.h>

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#define EI_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))

// The NEON dot-product tile, in signed integers (w−8)·x as the generic one.
EI_DOTPROD static void tile_dotprod(const ei_q4_job* j, int64_t m0, int64_t R, int64_t n0, int64_t n1) {
  const int64_t nb = j->nb;
  const uint8x16_t low = vdupq_n_u8(0x0F);
  const int8x16_t eight = vdupq_n_s8(8);
  for (int64_t n = n0; n < n1; n++) {
    const uint8_t* w = j->b + n * nb * 16;
    const float* sw = j->scales + n * nb;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    for (int64_t blk = 0; blk < nb; blk++) {
      uint8x16_t raw = vld1q_u8(w + blk * 16);
      int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, low)), eight);
      int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), eight);
      for (int64_t r = 0; r < R; r++) {
        const int64_t row = (m0 + r) * nb + blk;
        int8_t *xe, *xo;
        ei_q4_codes(j->qa + (m0 + r) * nb * EI_Q4_BLOCK, nb, blk, &xe, &xo);
        int32x4_t p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, vld1q_s8(xe)), hi, vld1q_s8(xo));
        acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(p), sw[blk] * j->sa[row]);
      }
    }
    for (int64_t r = 0; r < R; r++) j->y[(m0 + r) * j->N + n] = vaddvq_f32(acc[r]);
  }
}

static int has_dotprod(void) { return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; }
#endif

// ---------------------------------------------------------------------------
// Variants (best last) and work items.

typedef struct {
  const char* name;
  tile_fn tile;
  int (*runs)(void);
} variant;

static int always(void) { return 1; }

static const variant variants[] = {
    {"generic", tile_generic, always},
#ifdef EI_Q4_X86
    {"avx2", tile_avx2, has_avx2},
    {"avx512vnni", tile_vnni, has_vnni},
#endif
#ifdef EI_Q4_DOTPROD
    {"neon-dotprod", tile_dotprod, has_dotprod},
#endif
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static const variant* current = &variants[0];
static char supported[256], compiled[256];

void ei_q4_init(void) {
#ifdef EI_Q4_X86
  __builtin_cpu_init();
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

// Rows of a per tile, and weight rows per work item: a decode step's few
// rows split over the columns finely enough for every thread; a prefill
// chunk's items keep one chunk of weights (64 rows of ~K/2 bytes) in the
// first-level cache while a thread runs its tiles of a over it.
#define EI_Q4_ROWS 4

size_t ei_q4_items(ei_q4_job* j) {
  j->row_tiles = (j->M + EI_Q4_ROWS - 1) / EI_Q4_ROWS;
  j->chunk = j->row_tiles == 1 ? 16 : 64;
  j->col_chunks = (j->N + j->chunk - 1) / j->chunk;
  return (size_t)(j->row_tiles * j->col_chunks);
}

// Item i: column chunk i / row_tiles, row tile i % row_tiles, so that the
// consecutive items a thread takes share their weights.
void ei_q4_work(void* p, size_t i) {
  const ei_q4_job* j = p;
  const variant* v = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
  int64_t c = (int64_t)i / j->row_tiles, t = (int64_t)i % j->row_tiles;
  int64_t m0 = t * EI_Q4_ROWS, R = j->M - m0 < EI_Q4_ROWS ? j->M - m0 : EI_Q4_ROWS;
  int64_t n0 = c * j->chunk, n1 = n0 + j->chunk < j->N ? n0 + j->chunk : j->N;
  v->tile(j, m0, R, n0, n1);
}
