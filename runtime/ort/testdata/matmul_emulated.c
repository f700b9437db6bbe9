// TestKernelMatMulQ4VNNIEmulated's program: matmul_q4.c built with
// EI_Q4_EMULATE_VNNI, where the AVX-512 VNNI paths run on AVX2 with their
// one VNNI instruction (dpbusd) written in AVX2, against the generic path
// on the same packed weights and quantised activations: int4 and int8,
// decode rows and tiles of 1–4 rows, K not a multiple of 32, N not a
// multiple of 8. Prints one line per case and exits 1 if any differs by
// more than float rounding (1e-5 of Σ|a·w|).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../matmul_q4.h"

static uint64_t state = 88172645463325252ull;
static uint32_t next(void) {
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return (uint32_t)(state >> 32);
}

static void product(ei_q4_job* j) {
  for (int64_t i = 0; i < j->M; i++) ei_q4_quantize(j, (size_t)i);
  size_t n = ei_q4_items(j);
  for (size_t i = 0; i < n; i++) ei_q4_work(j, i);
}

int main(void) {
  ei_q4_init(0, EI_Q4_PREFETCH_CPU);
  if (ei_q4_use("avxvnni") != 0) {
    printf("skip: avxvnni does not run here (built without EI_Q4_EMULATE_VNNI, or no AVX2)\n");
    return 0;
  }
  const int shapes[][3] = {{1, 40, 768}, {1, 19, 100}, {3, 33, 288}, {6, 17, 1000}, {9, 8, 31}, {64, 70, 544}};
  int failed = 0;
  for (int bits = 4; bits <= 8; bits += 4)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], nb = (K + 31) / 32;
      const size_t bb = EI_Q4_BLOCK * (size_t)bits / 8;
      float *a = malloc(sizeof(float) * M * K), *sc = malloc(sizeof(float) * N * nb);
      float *y[2] = {malloc(sizeof(float) * M * N), malloc(sizeof(float) * M * N)};
      uint8_t* b = malloc(bb * N * nb);
      for (int64_t i = 0; i < M * K; i++) a[i] = ((float)(next() % 20001) - 10000) / 5000;
      for (size_t i = 0; i < bb * N * nb; i++) b[i] = (uint8_t)next();
      for (int64_t i = 0; i < N * nb; i++) sc[i] = (0.5f + (float)(next() % 1000) / 1000) / 64;
      // odd shapes keep float32 scales; even ones are float16 numbers
      // (powers of two over 2^12 here), packed as float16
      if (s % 2 == 0)
        for (int64_t i = 0; i < N * nb; i++) sc[i] = (float)(1 + next() % 64) / 4096;
      const int f16 = ei_q4_f16_exact(sc, (size_t)(N * nb));
      uint8_t* w = aligned_alloc(64, (ei_q4_packed_size(bits, f16, N, nb) + 63) / 64 * 64);
      void* scratch = malloc(ei_q4_scratch(M, nb));
      ei_q4_pack(bits, f16, 0, b, sc, N, nb, w);
      const char* names[2] = {"generic", "avxvnni"};
      for (int v = 0; v < 2; v++) {
        ei_q4_use(names[v]);
        ei_q4_job j = {.a = a, .y = y[v], .w = w, .bits = bits, .f16 = f16, .M = M, .N = N, .K = K, .nb = nb};
        ei_q4_bind(&j, scratch);
        product(&j);
      }
      double worst = 0;  // as a share of the allowance
      for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
          double mag = 0;
          for (int64_t k = 0; k < K; k++) {
            const uint8_t* blk = b + (n * nb + k / 32) * bb;
            int code = bits == 8 ? blk[k % 32] - 128 : ((blk[(k % 32) / 2] >> (4 * (k & 1))) & 15) - 8;
            mag += fabs(a[m * K + k] * code * sc[n * nb + k / 32]);
          }
          double d = fabs((double)y[0][m * N + n] - y[1][m * N + n]) / (1e-5 * mag + 1e-6);
          worst = d > worst ? d : worst;
        }
      printf("bits %d, M %lld N %lld K %lld, float%d scales: |avxvnni − generic| at most %.3f of the allowance\n",
             bits, (long long)M, (long long)N, (long long)K, f16 ? 16 : 32, worst);
      failed |= worst > 1;
      free(a), free(sc), free(y[0]), free(y[1]), free(b), free(w), free(scratch);
    }
  return failed;
}
