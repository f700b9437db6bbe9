// TestKernelNEONInstructions' program: one product of `rows` activation
// rows by a 1,024 × 512 matrix (float16 scales, as quant writes them) on
// the generic variant, then on the CPU's (the NEON tile under
// qemu-aarch64, which counts the instructions each executes). It prints
// the variant, or ends with status 1 where its outputs differ from the
// generic one's by more than float rounding.
//
//   neon_icount bits rows    (bits 4 or 8; rows 1 to 8)
#include <math.h>

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
  ei_q4_job j = random_job(bits, 0, rows, 1024, 512);
  const int64_t n = rows * j.N;
  float* ref = malloc((size_t)n * sizeof(float));
  if (!ref) return 1;
  for (int pass = 0; pass < 2; pass++) {  // generic's product, then the variant's
    ei_q4_use(pass ? variant : "generic");
    for (int i = 0; i < rows; i++) ei_q4_quantize(&j, (size_t)i);
    const size_t items = ei_q4_items(&j);
    for (size_t i = 0; i < items; i++) ei_q4_work(&j, i);
    if (!pass) {
      memcpy(ref, j.y, (size_t)n * sizeof(float));
      for (int64_t i = 0; i < n; i++) j.y[i] = NAN;  // an output the variant leaves unwritten fails
    }
  }
  for (int64_t i = 0; i < n; i++)
    if (!(fabsf(j.y[i] - ref[i]) <= 1e-4f * (fabsf(ref[i]) + 1.0f))) {
      fprintf(stderr, "neon_icount: %s: output %lld is %g, generic's %g\n", variant, (long long)i, j.y[i], ref[i]);
      return 1;
    }
  printf("%s\n", variant);
  return 0;
}
