// What the kernel's programs (gemv_share.c, gemv_cache.c, neon_icount.c)
// share: the kernels' clock in seconds, seeded random codes, qsort's order
// for medians, and a product of random codes ready to run.
#ifndef EDGEINFER_KERNEL_PROGRAM_H
#define EDGEINFER_KERNEL_PROGRAM_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../matmul_q4.h"
#include "../now.h"

static inline double now(void) { return (double)ei_now_ns() * 1e-9; }

// rnd is xorshift64's high half from a fixed seed: every run packs the same
// weights.
static uint64_t state = 88172645463325252ull;
static inline uint32_t rnd(void) {
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return (uint32_t)(state >> 32);
}

static inline int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// random_job is an N × K product (N/2 gate and N/2 up rows for swiglu) of
// random codes in `bits`, float16 scales (as quant writes them) and `rows`
// random activation rows, packed and bound to scratch of its own; out of
// memory ends the program.
static inline ei_q4_job random_job(int bits, int swiglu, int64_t rows, int64_t N, int64_t K) {
  const int64_t nb = K / EI_Q4_BLOCK;
  const size_t raw = (size_t)(N * nb) * EI_Q4_BLOCK * (size_t)bits / 8;
  uint8_t* b = malloc(raw);
  float* sc = malloc((size_t)(N * nb) * sizeof(float));
  float* a = malloc((size_t)(rows * K) * sizeof(float));
  uint8_t* w = aligned_alloc(64, (ei_q4_packed_size(bits, 1, N, nb) + 63) & ~(size_t)63);
  void* scratch = malloc(ei_q4_scratch(rows, nb));
  float* y = malloc((size_t)(rows * N) * sizeof(float));
  if (!b || !sc || !a || !w || !scratch || !y) {
    fprintf(stderr, "out of memory for a %lld x %lld product\n", (long long)N, (long long)K);
    exit(1);
  }
  for (size_t i = 0; i < raw; i++) b[i] = (uint8_t)rnd();
  for (int64_t i = 0; i < N * nb; i++) sc[i] = (float)(rnd() % 64 + 1) / 1024.0f;
  for (int64_t k = 0; k < rows * K; k++) a[k] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
  ei_q4_pack(bits, 1, swiglu, b, sc, N, nb, w);
  free(b), free(sc);
  ei_q4_job j;
  memset(&j, 0, sizeof j);
  j.a = a, j.y = y, j.w = w, j.bits = bits, j.swiglu = swiglu, j.f16 = 1;
  j.M = rows, j.N = N, j.K = K, j.nb = nb;
  ei_q4_bind(&j, scratch);
  return j;
}
#endif
