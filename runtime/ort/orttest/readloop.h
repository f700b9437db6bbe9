// The read loop every bandwidth share is measured against: a sum over a
// buffer, 128 bytes an iteration in independent lanes, in the loads the
// matrix kernels use — 256-bit where the CPU has AVX2, 128-bit NEON on
// arm64 — else in 64-bit words; the sum is returned so the loads cannot be
// dropped. One copy for ReadBandwidth (bandwidth.go, beside the engine's
// benchmarks) and for runtime/ort's testdata/gemv_share.c (beside the
// kernel alone), so both shares stand on the same loop.
#ifndef EDGEINFER_READLOOP_H
#define EDGEINFER_READLOOP_H
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2"))) static inline uint64_t ei_read_avx2(const uint8_t* p, size_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i*)(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i*)(p + i + 32)));
    s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i*)(p + i + 64)));
    s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i*)(p + i + 96)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
  uint64_t out[4];
  _mm256_storeu_si256((__m256i*)out, s);
  return out[0] + out[1] + out[2] + out[3];
}
#elif defined(__aarch64__) && defined(__GNUC__)
#include <arm_neon.h>
static inline uint64_t ei_read_neon(const uint8_t* p, size_t n) {
  uint64x2_t s[8];
  for (int k = 0; k < 8; k++) s[k] = vdupq_n_u64(0);
  for (size_t i = 0; i + 128 <= n; i += 128)
    for (int k = 0; k < 8; k++) s[k] = vaddq_u64(s[k], vld1q_u64((const uint64_t*)(p + i + 16 * k)));
  for (int k = 1; k < 8; k++) s[0] = vaddq_u64(s[0], s[k]);
  return vgetq_lane_u64(s[0], 0) + vgetq_lane_u64(s[0], 1);
}
#endif

static inline uint64_t ei_read_words(const uint8_t* p, size_t n) {
  const uint64_t* w = (const uint64_t*)p;
  uint64_t s[8] = {0};
  for (size_t i = 0; i + 16 <= n / 8; i += 16)
    for (int k = 0; k < 16; k++) s[k & 7] += w[i + k];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

// ei_read is the widest of the loops this CPU runs, over n bytes at p
// (64-byte aligned for AVX2).
static inline uint64_t ei_read(const void* p, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) return ei_read_avx2((const uint8_t*)p, n);
#elif defined(__aarch64__) && defined(__GNUC__)
  return ei_read_neon((const uint8_t*)p, n);
#endif
  return ei_read_words((const uint8_t*)p, n);
}
#endif
