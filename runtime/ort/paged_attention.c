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
//   3 key_cache    float, float16 or int8 [Hkv, N, bs, D]
//   4 value_cache  same type and shape
//   5 block_tables int64 [B, M]
//   6 context_lens int64 [B]           (cached tokens per row)
//   7 key_scale    float [Hkv, N]      (int8 pools only: one scale per block)
//   8 value_scale  float [Hkv, N]
// Output: float [B, T, Hq·D].
//
// The fused form (what pkg/onnx/llama emits) takes the layer's stacked
// q/k/v projection as input 0, [B, T, (Hq + 2·Hkv)·D], leaves inputs 1 and 2
// empty, and adds RotaryQKV's position inputs (rotary_qkv.c has the
// arithmetic):
//   9 position_ids int64 [B, T]
//  10 cos_cache    float [P, D/2]
//  11 sin_cache    float [P, D/2]
// It rotates q and k itself and has two more outputs, the step's keys
// (rotated) and values head-major, new_keys and new_values [B, Hkv, T, D],
// which the caller scatters into the pools — or, with input
//  12 slots        int64 [B, T]        (float and float16 pools)
// the node writes them into the pools itself, token t of row b at pool
// slot slots[b·T + t] (block · bs + offset, as kvcache's Sequence.Slots
// makes them; negative: a padding position, not written), and has no
// outputs but the first. The write happens in the work item that attends
// with those keys, on the session's threads, while the keys are still in
// the cache: the engine's own scatter after the run read them back and
// wrote the pools on one thread (the engine's BenchmarkBatchScaling logs
// its time a step; EDGEINFER_BENCH_BUNDLE runs it on a bundle built each
// way). No slot a step writes is one it reads: a row reads slots below its
// context length and writes its own next ones, and the cache never lets
// two rows share a block they write (copy on write). Int8 pools keep the
// caller's scatter: a new key can grow its block's scale and requantise
// the block's earlier rows.
//
// The fused form is one node a layer instead of RotaryQKV and
// PagedAttention: a decode step's rotation is a few thousand multiply-adds,
// less than ONNX Runtime's dispatch of a node and its five outputs
// (quant's TestProfileDecodeAndPrefill).
// Attributes: num_heads, kv_num_heads (int), scale (float, default 1/sqrt(D)).
//
// Token t of row b (position context_lens[b] + t) sees the row's cached
// slots j < context_lens[b] and the step's tokens t' ≤ t. Query head
// i reads KV head i / (Hq/Hkv) (grouped-query attention). Work is split
// over (row, KV head, block of tokens) with ONNX Runtime's own thread pool,
// so the kernel uses the session's intra-op threads and no others.
//
// This file is the arithmetic only; ops.c binds it to ONNX Runtime.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "f16.h"
#include "paged_attention.h"

static unsigned cpu_off;  // the instruction sets switched off (cpu.h), set by ei_attention_init

#if defined(__x86_64__)
#include <immintrin.h>  // F16C in the x86-64-v3 and v4 copies' widen_f16
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

// The float path's two inner loops, as functions of a run of keys (a block's
// slots, or one new token): scores s[r][col0+i] = scale·q[r]·key_i for the
// query rows q[0..rows), and o[r] += Σ_i s[r][col0+i]·value_i. Keys and
// values of a run are `step` floats apart.
typedef void (*score_fn)(const float* const* q, int64_t rows, const void* k, int64_t step, int64_t n,
                         int64_t D, float scale, float* s, int64_t stride, int64_t col0);
typedef void (*value_fn)(float* const* o, int64_t rows, const void* v, int64_t step, int64_t n, int64_t D,
                         float w, const float* s, int64_t stride, int64_t col0);
// fast holds a variant's hand-written decode loops: [0] over float runs,
// [1] over float16 pools (NULL: the compiled loops).
typedef struct {
  score_fn score[2];
  value_fn value[2];
} fast_loops;
// The prefill path's loops (attention_loops.h has the contract).
typedef void (*pscore_fn)(const float* const* q, int64_t rows, const float* kt, int64_t n, int64_t D,
                          float scale, float* s, int64_t stride);
typedef void (*pvalue_fn)(float* const* o, int64_t rows, const float* v, int64_t n, int64_t D, const float* s,
                          int64_t stride);

// EI_TILES4 and EI_TILES8 run CALL(r, R) over rows in tiles of at most 4
// (8) from row r, the last one shorter, R a constant in each call so that
// a tile's loops over its rows unroll and its accumulators stay in
// registers.
#define EI_TILES4(rows, CALL)                                                      \
  for (int64_t r_ = 0; r_ < (rows); r_ += 4) switch ((rows) - r_ < 4 ? (rows) - r_ : 4) { \
      case 1: CALL(r_, 1); break;                                                   \
      case 2: CALL(r_, 2); break;                                                   \
      case 3: CALL(r_, 3); break;                                                   \
      default: CALL(r_, 4); break;                                                  \
    }
#define EI_TILES8(rows, CALL)                                                      \
  for (int64_t r_ = 0; r_ < (rows); r_ += 8) switch ((rows) - r_ < 8 ? (rows) - r_ : 8) { \
      case 1: CALL(r_, 1); break;                                                   \
      case 2: CALL(r_, 2); break;                                                   \
      case 3: CALL(r_, 3); break;                                                   \
      case 4: CALL(r_, 4); break;                                                   \
      case 5: CALL(r_, 5); break;                                                   \
      case 6: CALL(r_, 6); break;                                                   \
      case 7: CALL(r_, 7); break;                                                   \
      default: CALL(r_, 8); break;                                                  \
    }

// item_rows points q[r] and o[r] at the query and output rows of item (b,
// h, tokens [t0, t1)): row r = (t − t0)·G + g is query head h·G + g of
// token t.
static inline void item_rows(const ei_attention_job* j, int64_t b, int64_t h, int64_t t0, int64_t t1,
                             const float** q, float** o) {
  for (int64_t t = t0; t < t1; t++)
    for (int64_t g = 0; g < j->G; g++) {
      const int64_t r = (t - t0) * j->G + g, off = ((b * j->T + t) * j->Hq + h * j->G + g) * j->D;
      q[r] = j->q + off;
      o[r] = j->out + off;
    }
}

// The loops (attention_loops.h) are compiled for the baseline and, on
// x86-64 with GCC, also for x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512);
// arm64 gets NEON from its baseline. The variant table below picks a copy
// at load time; a test can pick any copy the CPU runs.
#define EI_SFX generic
#include "attention_loops.h"
#undef EI_SFX

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define EI_X86_LEVELS 1
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
#define EI_SFX v3
#include "attention_loops.h"
#undef EI_SFX
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
#define EI_SFX v4
#include "attention_loops.h"
#undef EI_SFX
#pragma GCC pop_options
#endif

// Hand-written AVX2+FMA versions of the float loops that keep several rows
// and keys in registers, for head sizes that are a multiple of 16.
#ifdef EI_X86_LEVELS
#define EI_AVX2 __attribute__((target("avx2,fma,f16c")))

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

// load8 is eight keys' or values' elements from index i of a run: float,
// or float16 widened as it is loaded (F16C), so that a float16 pool is read
// by the same loops with no pass of its own.
EI_AVX2 static inline __attribute__((always_inline)) __m256 load8(const void* p, int64_t i, const int f16) {
  return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)((const uint16_t*)p + i)))
             : _mm256_loadu_ps((const float*)p + i);
}

// score_avx2 takes keys four at a time against one or two query rows: up
// to eight accumulators, each key vector loaded once for both rows. D is a
// multiple of 8 (checked by the caller). score_f16_avx2 is the same over a
// float16 pool.
EI_AVX2 static inline __attribute__((always_inline)) void score_avx2_t(const float* const* q, int64_t rows,
                                                                     const void* k, int64_t step, int64_t n,
                                                                     int64_t D, float scale, float* s,
                                                                     int64_t stride, int64_t col0, const int f16) {
  __m128 sc = _mm_set1_ps(scale);
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) {
    const float *q0 = q[r], *q1 = q[r + 1];
    float *s0 = s + r * stride + col0, *s1 = s0 + stride;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      const int64_t kp = i * step;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      for (int64_t d = 0; d < D; d += 8) {
        __m256 x0 = _mm256_loadu_ps(q0 + d), x1 = _mm256_loadu_ps(q1 + d), kv;
        kv = load8(k, kp + d, f16), a0 = _mm256_fmadd_ps(x0, kv, a0), b0 = _mm256_fmadd_ps(x1, kv, b0);
        kv = load8(k, kp + step + d, f16), a1 = _mm256_fmadd_ps(x0, kv, a1), b1 = _mm256_fmadd_ps(x1, kv, b1);
        kv = load8(k, kp + 2 * step + d, f16), a2 = _mm256_fmadd_ps(x0, kv, a2), b2 = _mm256_fmadd_ps(x1, kv, b2);
        kv = load8(k, kp + 3 * step + d, f16), a3 = _mm256_fmadd_ps(x0, kv, a3), b3 = _mm256_fmadd_ps(x1, kv, b3);
      }
      _mm_storeu_ps(s0 + i, _mm_mul_ps(sc, sum4(a0, a1, a2, a3)));
      _mm_storeu_ps(s1 + i, _mm_mul_ps(sc, sum4(b0, b1, b2, b3)));
    }
    for (; i < n; i++) {
      const int64_t kp = i * step;
      __m256 a = _mm256_setzero_ps(), b = a;
      for (int64_t d = 0; d < D; d += 8) {
        __m256 kv = load8(k, kp + d, f16);
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
      const int64_t kp = i * step;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t d = 0; d < D; d += 8) {
        __m256 x0 = _mm256_loadu_ps(q0 + d);
        a0 = _mm256_fmadd_ps(x0, load8(k, kp + d, f16), a0);
        a1 = _mm256_fmadd_ps(x0, load8(k, kp + step + d, f16), a1);
        a2 = _mm256_fmadd_ps(x0, load8(k, kp + 2 * step + d, f16), a2);
        a3 = _mm256_fmadd_ps(x0, load8(k, kp + 3 * step + d, f16), a3);
      }
      _mm_storeu_ps(s0 + i, _mm_mul_ps(sc, sum4(a0, a1, a2, a3)));
    }
    for (; i < n; i++) {
      const int64_t kp = i * step;
      __m256 a = _mm256_setzero_ps();
      for (int64_t d = 0; d < D; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), load8(k, kp + d, f16), a);
      s0[i] = scale * sum1(a);
    }
  }
}
EI_AVX2 static void score_avx2(const float* const* q, int64_t rows, const void* keys, int64_t step, int64_t n,
                               int64_t D, float scale, float* s, int64_t stride, int64_t col0) {
  score_avx2_t(q, rows, keys, step, n, D, scale, s, stride, col0, 0);
}
EI_AVX2 static void score_f16_avx2(const float* const* q, int64_t rows, const void* keys, int64_t step, int64_t n,
                                   int64_t D, float scale, float* s, int64_t stride, int64_t col0) {
  score_avx2_t(q, rows, keys, step, n, D, scale, s, stride, col0, 1);
}

// value_rows adds R (≤ 4) rows' weighted values over 16 columns at a time:
// 2·R accumulators that stay in registers across the whole run of keys,
// each score broadcast straight from memory (a load, where w·s took a
// multiply and a shuffle per row and key: 12 % of a prefill chunk's
// attention), w applied once at the end.
EI_AVX2 static inline __attribute__((always_inline)) void value_rows(float* const* o, int R, const void* v, int64_t step,
                                                                   int64_t n, int64_t D, float w, const float* s,
                                                                   int64_t stride, const int f16) {
  const __m256 wv = _mm256_set1_ps(w);
  for (int64_t d = 0; d < D; d += 16) {
    __m256 acc[4][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i++) {
      __m256 v0 = load8(v, i * step + d, f16), v1 = load8(v, i * step + d + 8, f16);
      for (int r = 0; r < R; r++) {
        __m256 p = _mm256_broadcast_ss(s + r * stride + i);
        acc[r][0] = _mm256_fmadd_ps(p, v0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(p, v1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; r++) {
      _mm256_storeu_ps(o[r] + d, _mm256_fmadd_ps(wv, acc[r][0], _mm256_loadu_ps(o[r] + d)));
      _mm256_storeu_ps(o[r] + d + 8, _mm256_fmadd_ps(wv, acc[r][1], _mm256_loadu_ps(o[r] + d + 8)));
    }
  }
}

// value_avx2 needs D a multiple of 16 (checked by the caller);
// value_f16_avx2 is the same over a float16 pool.
EI_AVX2 static void value_avx2(float* const* o, int64_t rows, const void* values, int64_t step, int64_t n, int64_t D,
                               float w, const float* s, int64_t stride, int64_t col0) {
#define EI_CALL(r, R) value_rows(o + (r), R, values, step, n, D, w, s + (r) * stride + col0, stride, 0)
  EI_TILES4(rows, EI_CALL);
#undef EI_CALL
}
EI_AVX2 static void value_f16_avx2(float* const* o, int64_t rows, const void* values, int64_t step, int64_t n,
                                   int64_t D, float w, const float* s, int64_t stride, int64_t col0) {
#define EI_CALL(r, R) value_rows(o + (r), R, values, step, n, D, w, s + (r) * stride + col0, stride, 1)
  EI_TILES4(rows, EI_CALL);
#undef EI_CALL
}

// The prefill loops by hand. Scores: a tile of rows against sixteen keys,
// one query element broadcast against a 64-byte aligned vector of kt's,
// the tile's accumulators in registers across the whole head. Values: each
// variant's decode loop (value_avx2, value_avx512) over one run of keys,
// into zeroed rows. D is a multiple of 16 (checked by the caller).
EI_AVX2 static inline __attribute__((always_inline)) void pscore_rows_avx2(const float* const* q, const int R,
                                                                         const float* kt, int64_t n,
                                                                         int64_t D, float scale, float* s,
                                                                         int64_t stride) {
  const __m256 sc = _mm256_set1_ps(scale);
  for (int64_t c0 = 0; c0 < n; c0 += 16) {
    __m256 a[4][2];
    for (int r = 0; r < R; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
      const __m256 k0 = _mm256_load_ps(kt + c0 * D + d * 16), k1 = _mm256_load_ps(kt + c0 * D + d * 16 + 8);
      for (int r = 0; r < R; r++) {
        const __m256 x = _mm256_broadcast_ss(q[r] + d);
        a[r][0] = _mm256_fmadd_ps(x, k0, a[r][0]), a[r][1] = _mm256_fmadd_ps(x, k1, a[r][1]);
      }
    }
    for (int r = 0; r < R; r++) {
      _mm256_storeu_ps(s + r * stride + c0, _mm256_mul_ps(a[r][0], sc));
      _mm256_storeu_ps(s + r * stride + c0 + 8, _mm256_mul_ps(a[r][1], sc));
    }
  }
}
EI_AVX2 static void pscore_avx2(const float* const* q, int64_t rows, const float* kt, int64_t n, int64_t D,
                                float scale, float* s, int64_t stride) {
#define EI_CALL(r, R) pscore_rows_avx2(q + (r), R, kt, n, D, scale, s + (r) * stride, stride)
  EI_TILES4(rows, EI_CALL);
#undef EI_CALL
}

// Prefill values are the decode loop's (value_avx2) over one run of keys,
// into zeroed rows.
EI_AVX2 static void pvalue_avx2(float* const* o, int64_t rows, const float* v, int64_t n, int64_t D, const float* s,
                                int64_t stride) {
  for (int64_t r = 0; r < rows; r++) memset(o[r], 0, (size_t)D * sizeof(float));
  value_avx2(o, rows, v, D, n, D, 1.0f, s, stride, 0);
}
#define EI_AVX512 __attribute__((target("avx512f,avx2,fma")))
EI_AVX512 static inline __attribute__((always_inline)) void pscore_rows_avx512(const float* const* q, const int R,
                                                                             const float* kt, int64_t n,
                                                                             int64_t D, float scale, float* s,
                                                                             int64_t stride) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t c0 = 0; c0 < n; c0 += 16) {
    __m512 a[8];
    for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
      const __m512 k = _mm512_load_ps(kt + c0 * D + d * 16);
      for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d]), k, a[r]);
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(s + r * stride + c0, _mm512_mul_ps(a[r], sc));
  }
}
EI_AVX512 static void pscore_avx512(const float* const* q, int64_t rows, const float* kt, int64_t n, int64_t D,
                                    float scale, float* s, int64_t stride) {
#define EI_CALL(r, R) pscore_rows_avx512(q + (r), R, kt, n, D, scale, s + (r) * stride, stride)
  EI_TILES8(rows, EI_CALL);
#undef EI_CALL
}

// The decode loops with AVX-512: the AVX2 ones' shape (scores four keys at a
// time, values with the rows' accumulators in registers across the run of
// keys) at sixteen lanes, and up to four query rows a pass, so that a
// grouped-query head's three or four rows read and widen each key and
// value once (the AVX2 loops take rows in pairs: the third row of a group
// of three read every key again). BenchmarkPagedAttentionDecode, variants
// avx2 and avx512 in turn, measures them.
EI_AVX512 static inline __attribute__((always_inline)) __m512 load16(const void* p, int64_t i, const int f16) {
  return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)((const uint16_t*)p + i)))
             : _mm512_loadu_ps((const float*)p + i);
}

// sum4_512 is the four vectors' sums, in order.
EI_AVX512 static inline __attribute__((always_inline)) __m128 sum4_512(__m512 a, __m512 b, __m512 c, __m512 d) {
  // 128-bit quarters: ab = [a0+a2, a1+a3, b0+b2, b1+b3], cd likewise, then
  // abcd = [a, b, c, d] with each quarter holding four partial sums.
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
  x = _mm512_add_ps(x, _mm512_permute_ps(x, 0x4E));  // within each quarter: lanes 0,1 += 2,3
  x = _mm512_add_ps(x, _mm512_permute_ps(x, 0xB1));  // lane 0 += lane 1
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), x));
}

// score_rows_512: R (≤ 4) rows against keys four at a time, 4·R
// accumulators; D a multiple of 16.
EI_AVX512 static inline __attribute__((always_inline)) void score_rows_512(const float* const* q, const int R,
                                                                         const void* k, int64_t step, int64_t n,
                                                                         int64_t D, float scale, float* s,
                                                                         int64_t stride, const int f16) {
  const __m128 sc = _mm_set1_ps(scale);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const int64_t kp = i * step;
    __m512 a[4][4];
    for (int r = 0; r < R; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      const __m512 k0 = load16(k, kp + d, f16), k1 = load16(k, kp + step + d, f16);
      const __m512 k2 = load16(k, kp + 2 * step + d, f16), k3 = load16(k, kp + 3 * step + d, f16);
      for (int r = 0; r < R; r++) {
        const __m512 x = _mm512_loadu_ps(q[r] + d);
        a[r][0] = _mm512_fmadd_ps(x, k0, a[r][0]), a[r][1] = _mm512_fmadd_ps(x, k1, a[r][1]);
        a[r][2] = _mm512_fmadd_ps(x, k2, a[r][2]), a[r][3] = _mm512_fmadd_ps(x, k3, a[r][3]);
      }
    }
    for (int r = 0; r < R; r++) _mm_storeu_ps(s + r * stride + i, _mm_mul_ps(sc, sum4_512(a[r][0], a[r][1], a[r][2], a[r][3])));
  }
  for (; i < n; i++) {
    __m512 a[4];
    for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      const __m512 kv = load16(k, i * step + d, f16);
      for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q[r] + d), kv, a[r]);
    }
    for (int r = 0; r < R; r++) s[r * stride + i] = scale * _mm512_reduce_add_ps(a[r]);
  }
}
EI_AVX512 static void score_avx512(const float* const* q, int64_t rows, const void* keys, int64_t step, int64_t n,
                                   int64_t D, float scale, float* s, int64_t stride, int64_t col0) {
#define EI_CALL(r, R) score_rows_512(q + (r), R, keys, step, n, D, scale, s + (r) * stride + col0, stride, 0)
  EI_TILES4(rows, EI_CALL);
#undef EI_CALL
}
EI_AVX512 static void score_f16_avx512(const float* const* q, int64_t rows, const void* keys, int64_t step,
                                       int64_t n, int64_t D, float scale, float* s, int64_t stride, int64_t col0) {
#define EI_CALL(r, R) score_rows_512(q + (r), R, keys, step, n, D, scale, s + (r) * stride + col0, stride, 1)
  EI_TILES4(rows, EI_CALL);
#undef EI_CALL
}

// value_cols_512: R (≤ 4) rows' weighted values over C (≤ 4) vectors of
// sixteen columns from d, R·C accumulators across the whole run of keys,
// each score broadcast once per row and key.
EI_AVX512 static inline __attribute__((always_inline)) void value_cols_512(float* const* o, const int R, const int C,
                                                                         const void* v, int64_t step, int64_t n,
                                                                         int64_t d, __m512 wv, const float* s,
                                                                         int64_t stride, const int f16) {
  __m512 acc[4][4];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i++) {
    __m512 x[4];
    for (int c = 0; c < C; c++) x[c] = load16(v, i * step + d + 16 * c, f16);
    for (int r = 0; r < R; r++) {
      const __m512 p = _mm512_set1_ps(s[r * stride + i]);
      for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(p, x[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++)
      _mm512_storeu_ps(o[r] + d + 16 * c, _mm512_fmadd_ps(wv, acc[r][c], _mm512_loadu_ps(o[r] + d + 16 * c)));
}

// value_rows_512 takes D (a multiple of 16) 64 columns at a time, the last
// part shorter.
EI_AVX512 static inline __attribute__((always_inline)) void value_rows_512(float* const* o, const int R, const void* v,
                                                                         int64_t step, int64_t n, int64_t D, float w,
                                                                         const float* s, int64_t stride, const int f16) {
  const __m512 wv = _mm512_set1_ps(w);
  for (int64_t d = 0; d < D; d += 64) switch (D - d >= 64 ? 4 : (int)((D - d) / 16)) {
      case 1: value_cols_512(o, R, 1, v, step, n, d, wv, s, stride, f16); break;
      case 2: value_cols_512(o, R, 2, v, step, n, d, wv, s, stride, f16); break;
      case 3: value_cols_512(o, R, 3, v, step, n, d, wv, s, stride, f16); break;
      default: value_cols_512(o, R, 4, v, step, n, d, wv, s, stride, f16); break;
    }
}
EI_AVX512 static void value_avx512(float* const* o, int64_t rows, const void* values, int64_t step, int64_t n,
                                   int64_t D, float w, const float* s, int64_t stride, int64_t col0) {
#define EI_CALL(r, R) value_rows_512(o + (r), R, values, step, n, D, w, s + (r) * stride + col0, stride, 0)
  EI_TILES4(rows, EI_CALL);
#undef EI_CALL
}
EI_AVX512 static void value_f16_avx512(float* const* o, int64_t rows, const void* values, int64_t step, int64_t n,
                                       int64_t D, float w, const float* s, int64_t stride, int64_t col0) {
#define EI_CALL(r, R) value_rows_512(o + (r), R, values, step, n, D, w, s + (r) * stride + col0, stride, 1)
  EI_TILES4(rows, EI_CALL);
#undef EI_CALL
}

// Prefill values are the decode loop's (value_avx512) over one run of
// keys, into zeroed rows, as with AVX2.
EI_AVX512 static void pvalue_avx512(float* const* o, int64_t rows, const float* v, int64_t n, int64_t D,
                                    const float* s, int64_t stride) {
  for (int64_t r = 0; r < rows; r++) memset(o[r], 0, (size_t)D * sizeof(float));
  value_avx512(o, rows, v, D, n, D, 1.0f, s, stride, 0);
}
#endif

// ---------------------------------------------------------------------------
// Variants.

typedef void (*attend_fn)(const ei_attention_job* j, int64_t b, int64_t h, int64_t t0, int64_t t1, float* s,
                          const fast_loops* fast);
typedef void (*prefill_fn)(const ei_attention_job* j, int64_t b, int64_t h, int64_t t0, int64_t t1, float* s,
                           pscore_fn fast_score, pvalue_fn fast_value);

typedef struct {
  const char* name;
  attend_fn attend;
  fast_loops fast;      // NULL members: the compiled loops for every head size
  int (*runs)(void);    // whether this CPU can run it
  prefill_fn prefill;
  pscore_fn prefill_score;  // NULL: the compiled loops
  pvalue_fn prefill_value;
} variant;

static int always(void) { return 1; }
#ifdef EI_X86_LEVELS
static int has_v3(void) { return !(cpu_off & EI_CPU_AVX2) && __builtin_cpu_supports("x86-64-v3"); }
static int has_v4(void) { return has_v3() && !(cpu_off & EI_CPU_AVX512) && __builtin_cpu_supports("x86-64-v4"); }
#endif

// Best last: ei_attention_init picks the last one the CPU runs. "-loops"
// variants use the compiled loops also where a hand-written one exists, so
// that a test reaches code a host would never pick.
static const variant variants[] = {
    {"generic", attend_generic, {{NULL}, {NULL}}, always, attend_prefill_generic, NULL, NULL},
#ifdef EI_X86_LEVELS
    {"avx2-loops", attend_v3, {{NULL}, {NULL}}, has_v3, attend_prefill_v3, NULL, NULL},
    {"avx2", attend_v3, {{score_avx2, score_f16_avx2}, {value_avx2, value_f16_avx2}}, has_v3, attend_prefill_v3,
     pscore_avx2, pvalue_avx2},
    {"avx512-loops", attend_v4, {{NULL}, {NULL}}, has_v4, attend_prefill_v4, NULL, NULL},
    {"avx512", attend_v4, {{score_avx512, score_f16_avx512}, {value_avx512, value_f16_avx512}}, has_v4,
     attend_prefill_v4, pscore_avx512, pvalue_avx512},
#endif
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static const variant* current = &variants[0];
int ei_attention_prefetch_on = 1;
static char supported[256], compiled[256];
#ifdef EI_X86_LEVELS
static int have_f16c;  // the pools' float16 writes convert with F16C (store_tokens)
#endif

void ei_attention_init(unsigned off) {
  cpu_off = off;
#ifdef EI_X86_LEVELS
  __builtin_cpu_init();
  have_f16c = !(off & EI_CPU_AVX2) && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#endif
  size_t n = 0, c = 0;
  supported[0] = 0;
  for (size_t i = 0; i < N_VARIANTS; i++) {
    c += (size_t)snprintf(compiled + c, sizeof compiled - c, "%s%s", c ? "," : "", variants[i].name);
    if (!variants[i].runs()) continue;
    __atomic_store_n(&current, &variants[i], __ATOMIC_RELEASE);
    n += (size_t)snprintf(supported + n, sizeof supported - n, "%s%s", n ? "," : "", variants[i].name);
  }
}

const char* ei_attention_variants(void) { return supported; }
const char* ei_attention_compiled(void) { return compiled; }
const char* ei_attention_current(void) { return __atomic_load_n(&current, __ATOMIC_ACQUIRE)->name; }

int ei_attention_use(const char* name) {
  for (size_t i = 0; i < N_VARIANTS; i++)
    if (strcmp(variants[i].name, name) == 0 && variants[i].runs()) {
      __atomic_store_n(&current, &variants[i], __ATOMIC_RELEASE);
      return 0;
    }
  return -1;
}

// ---------------------------------------------------------------------------
// The prefill path's gathered keys and values.

size_t ei_attention_prep_bytes(ei_attention_job* j) {
  if (j->T < EI_PREFILL_TOKENS) return 0;
  j->Lp = (j->max_keys + 15) / 16 * 16;
  return 2 * (size_t)(j->B * j->Hkv * j->Lp * j->D) * sizeof(float);
}

// Item i: row b's keys for KV head h, the cached ones through the block
// table (an int8 pool's times its block's scale, a float16 pool's widened),
// then this step's.
void ei_attention_prep(void* p, size_t i) {
  const ei_attention_job* j = p;
  const int64_t b = (int64_t)i / j->Hkv, h = (int64_t)i % j->Hkv, D = j->D, Lp = j->Lp;
  const int64_t ctx = j->cl[b], L = ctx + j->T;
  float *kt = j->kt + i * (size_t)(Lp * D), *vt = j->vt + i * (size_t)(Lp * D);
  for (int64_t c = 0; c < ctx; c++) {
    const int64_t blk = h * j->N + j->bt[b * j->M + c / j->bs], slot = (blk * j->bs + c % j->bs) * D;
    if (j->int8) {
      const int8_t *k = (const int8_t*)j->kc + slot, *v = (const int8_t*)j->vc + slot;
      const float ks = j->ks[blk], vs = j->vs[blk];
      for (int64_t d = 0; d < D; d++) kt[EI_KT(c, d, D)] = ks * (float)k[d], vt[c * D + d] = vs * (float)v[d];
    } else if (j->f16) {
      const uint16_t *k = (const uint16_t*)j->kc + slot, *v = (const uint16_t*)j->vc + slot;
      for (int64_t d = 0; d < D; d++) kt[EI_KT(c, d, D)] = ei_f16_to_float(k[d]), vt[c * D + d] = ei_f16_to_float(v[d]);
    } else {
      const float *k = (const float*)j->kc + slot, *v = (const float*)j->vc + slot;
      for (int64_t d = 0; d < D; d++) kt[EI_KT(c, d, D)] = k[d];
      memcpy(vt + c * D, v, (size_t)D * sizeof(float));
    }
  }
  for (int64_t t = 0; t < j->T; t++) {
    const size_t at = (size_t)(((b * j->T + t) * j->Hkv + h) * D);
    for (int64_t d = 0; d < D; d++) kt[EI_KT(ctx + t, d, D)] = j->k[at + d];
    memcpy(vt + (ctx + t) * D, j->v + at, (size_t)D * sizeof(float));
  }
  for (int64_t c = L; c < Lp; c++)
    for (int64_t d = 0; d < D; d++) kt[EI_KT(c, d, D)] = 0;
  memset(vt + L * D, 0, (size_t)((Lp - L) * D) * sizeof(float));
}

// ---------------------------------------------------------------------------
// Writing the step's keys and values into the pools (the job's slots).

#ifdef EI_X86_LEVELS
// narrow8 is F16C's conversion (to nearest, ties to even, as
// ei_f16_from_float) of n floats, eight at a time; eight that hold a NaN go
// through ei_f16_from_float, whose NaN is one quiet NaN where F16C keeps the
// payload.
EI_AVX2 static void narrow8(uint16_t* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      for (int k = 0; k < 8; k++) dst[i + k] = ei_f16_from_float(src[i + k]);
      continue;
    }
    _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; i++) dst[i] = ei_f16_from_float(src[i]);
}
#endif

static void put_row(const ei_attention_job* j, void* pool, int64_t at, const float* src) {
  if (!j->f16) {
    memcpy((float*)pool + at, src, (size_t)j->D * sizeof(float));
    return;
  }
  uint16_t* dst = (uint16_t*)pool + at;
#ifdef EI_X86_LEVELS
  if (have_f16c) {
    narrow8(dst, src, j->D);
    return;
  }
#endif
  for (int64_t d = 0; d < j->D; d++) dst[d] = ei_f16_from_float(src[d]);
}

// store_tokens writes tokens [t0, t1) of row b, KV head h into their slots
// (ops.c checked every slot lies in the pools).
static void store_tokens(const ei_attention_job* j, int64_t b, int64_t h, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; t++) {
    const int64_t slot = j->slots[b * j->T + t];
    if (slot < 0) continue;
    const int64_t src = ((b * j->T + t) * j->Hkv + h) * j->D, dst = (h * j->N * j->bs + slot) * j->D;
    put_row(j, j->kdst, dst, j->k + src);
    put_row(j, j->vdst, dst, j->v + src);
  }
}

// ---------------------------------------------------------------------------
// Work items: (row, KV head, block of EI_TOKEN_BLOCK tokens).

size_t ei_attention_items(ei_attention_job* j) {
  j->token_blocks = (j->T + EI_TOKEN_BLOCK - 1) / EI_TOKEN_BLOCK;
  return (size_t)(j->B * j->Hkv * j->token_blocks);
}

void ei_attention_work(void* p, size_t i) {
  const ei_attention_job* j = p;
  const variant* v = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
  int64_t tb = (int64_t)i % j->token_blocks, rest = (int64_t)i / j->token_blocks;
  int64_t h = rest % j->Hkv, b = rest / j->Hkv;
  int64_t t0 = tb * EI_TOKEN_BLOCK, t1 = t0 + EI_TOKEN_BLOCK < j->T ? t0 + EI_TOKEN_BLOCK : j->T;
  // Score rows: on the stack up to 32 KiB (a decode step up to ~2,700
  // cached tokens with 3 query heads per KV head), else on the heap.
  float stack[8192];
  size_t need = (size_t)((t1 - t0) * j->G * (j->kt != NULL ? j->Lp : j->max_keys));
  float* s = need <= sizeof stack / sizeof stack[0] ? stack : malloc(need * sizeof(float));
  if (s == NULL) {
    __atomic_store_n((int*)&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  if (j->kt != NULL)
    v->prefill(j, b, h, t0, t1, s, v->prefill_score, v->prefill_value);
  else
    v->attend(j, b, h, t0, t1, s, &v->fast);
  if (s != stack) free(s);
  if (j->slots != NULL) store_tokens(j, b, h, t0, t1);
}
