// TestKernelNEONInstructions' program: one product of `rows` activation
// rows by a 1,024 × 512 matrix (float16 scales, as quant writes them) on
// the generic variant, then on the CPU's (the NEON tile under
// qemu-aarch64, which counts the instructions each executes). It prints
// the variant, or ends with status 1 where its outputs differ from the
// generic one's by more than float rounding.
//
//   neon_icount bits rows    (bits 4 or 8; rows 1 to 8)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../matmul_q4.h"
#include "kernel_program.h"

int main(int argc, char** argv) {
  const int bits = argc == 3 ? atoi(argv[1]) : 0, rows = argc == 3 ? atoi(argv[2]) : 0;
  if (argc != 3 || (bits != 4 && bits != 8) || rows < 1 || rows > 8) {
    fprintf(stderr, "neon_icount: want bits (4 or 8) and rows (1 to 8)\n");
    return 2;
  }
  ei_q4_init(0, EI_Q4_PREFETCH_CPU);
  char variant[64];
  snprintf(variant, sizeof variant, "%s", ei_q4_current());
  const int64_t N = 1024, K = 512, nb = K / EI_Q4_BLOCK;
  const size_t raw = (size_t)(N * nb) * EI_Q4_BLOCK * (size_t)bits / 8;
  uint8_t* b = malloc(raw);
  float* sc = malloc((size_t)(N * nb) * sizeof(float));
  float* a = malloc((size_t)(rows * K) * sizeof(float));
  uint8_t* w = aligned_alloc(64, (ei_q4_packed_size(bits, 1, N, nb) + 63) & ~(size_t)63);
  void* scratch = malloc(ei_q4_scratch(rows, nb));
  float* y = malloc((size_t)(rows * N) * sizeof(float));
  if (!b || !sc || !a || !w || !scratch || !y) {
    fprintf(stderr, "neon_icount: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < raw; i++) b[i] = (uint8_t)rnd();
  for (int64_t i = 0; i < N * nb; i++) sc[i] = (float)(rnd() % 64 + 1) / 1024.0f;
  for (int64_t k = 0; k < rows * K; k++) a[k] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
  ei_q4_pack(bits, 1, 0, b, sc, N, nb, w);
  float* ref = malloc((size_t)(rows * N) * sizeof(float));
  if (!ref) return 1;
  for (int pass = 0; pass < 2; pass++) {  // generic's product, then the variant's
    ei_q4_use(pass ? variant : "generic");
    ei_q4_job j;
    memset(&j, 0, sizeof j);
    j.a = a, j.y = pass ? y : ref, j.w = w, j.bits = bits, j.f16 = 1, j.M = rows, j.N = N, j.K = K, j.nb = nb;
    ei_q4_bind(&j, scratch);
    for (int i = 0; i < rows; i++) ei_q4_quantize(&j, (size_t)i);
    const size_t items = ei_q4_items(&j);
    for (size_t i = 0; i < items; i++) ei_q4_work(&j, i);
  }
  for (int64_t i = 0; i < rows * N; i++)
    if (!(fabsf(y[i] - ref[i]) <= 1e-4f * (fabsf(ref[i]) + 1.0f))) {
      fprintf(stderr, "neon_icount: %s: output %lld is %g, generic's %g\n", variant, (long long)i, y[i], ref[i]);
      return 1;
    }
  printf("%s\n", variant);
  return 0;
}
