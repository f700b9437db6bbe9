// TestKernelNEONInstructions' program: one product of one activation row
// by a 1,024 × 512 matrix (float16 scales, as quant writes them), on the
// NEON variant's batch-1 product or on its tile, for qemu-aarch64 to count
// the instructions each executes. It prints the variant and one output, so
// that both runs can be checked to agree.
//
//   gemv_icount bits gemv_on    (bits 4 or 8; gemv_on 1 or 0)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../matmul_q4.h"
#include "kernel_program.h"

int main(int argc, char** argv) {
  const int bits = argc > 2 ? atoi(argv[1]) : 0;
  if (argc != 3 || (bits != 4 && bits != 8)) {
    fprintf(stderr, "gemv_icount: want bits (4 or 8) and gemv_on (1 or 0)\n");
    return 2;
  }
  ei_q4_init(0, EI_Q4_PREFETCH_CPU);
  ei_q4_gemv_on = atoi(argv[2]);
  const int64_t N = 1024, K = 512, nb = K / EI_Q4_BLOCK;
  const size_t raw = (size_t)(N * nb) * EI_Q4_BLOCK * (size_t)bits / 8;
  uint8_t* b = malloc(raw);
  float* sc = malloc((size_t)(N * nb) * sizeof(float));
  float* a = malloc((size_t)K * sizeof(float));
  uint8_t* w = aligned_alloc(64, (ei_q4_packed_size(bits, 1, N, nb) + 63) & ~(size_t)63);
  void* scratch = malloc(ei_q4_scratch(1, nb));
  float* y = malloc((size_t)N * sizeof(float));
  if (!b || !sc || !a || !w || !scratch || !y) {
    fprintf(stderr, "gemv_icount: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < raw; i++) b[i] = (uint8_t)rnd();
  for (int64_t i = 0; i < N * nb; i++) sc[i] = (float)(rnd() % 64 + 1) / 1024.0f;
  for (int64_t k = 0; k < K; k++) a[k] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
  ei_q4_pack(bits, 1, 0, b, sc, N, nb, w);
  ei_q4_job j;
  memset(&j, 0, sizeof j);
  j.a = a, j.y = y, j.w = w, j.bits = bits, j.f16 = 1, j.M = 1, j.N = N, j.K = K, j.nb = nb;
  ei_q4_bind(&j, scratch);
  ei_q4_quantize(&j, 0);
  const size_t items = ei_q4_items(&j);
  for (size_t i = 0; i < items; i++) ei_q4_work(&j, i);
  double sum = 0;
  for (int64_t n = 0; n < N; n++) sum += y[n];
  printf("%s %.6g\n", ei_q4_current(), sum);
  return 0;
}
