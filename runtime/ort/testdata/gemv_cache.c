// BenchmarkMatMulQ4GEMV's program: each variant's product of one
// activation row (a batch-1 decode step's) in one thread, over weights
// the caches hold, where the arithmetic and the instructions around it,
// not the memory, set the time:
//
//   l2   one 1,536 × 512 matrix (0.44 MB in int4): the second-level cache;
//   50m  synthetic-50m's step (six layers' q/k/v, o, gate/up and down
//        projections and the 32,000-row head: 19.8 MB in int4, which a
//        last-level cache of 32 MB holds; 37 MB in int8, which it does
//        not, so that int8's line also shows how a variant streams).
//
// A variant with a batch-1 product of its own (ei_q4_gemv_tile) runs a
// second time on its tile, as "<variant>-tile" (ei_q4_gemv_on off): what
// the specialisation buys on this core.
//
// Rounds alternate the variants; each prints its median time a product
// (l2) or a step (50m) in µs and its ratio to the fastest variant's. A
// variant whose outputs differ from the generic one's by more than float
// rounding ends the program with status 1 before any figure prints.
//
//   gemv_cache [rounds [bits]]    (bits 4, the default, or 8)
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../matmul_q4.h"
#include "kernel_program.h"

#define MATS 32
typedef struct {
  ei_q4_job jobs[MATS];
  int n;
} set;

// add appends an N × K product of random codes and one activation row
// (random_job).
static void add(set* s, int64_t N, int64_t K, int swiglu, int bits) { s->jobs[s->n++] = random_job(bits, swiglu, 1, N, K); }

// run is one product of every matrix of the set, in order, on this thread.
static void run(set* s) {
  for (int m = 0; m < s->n; m++) {
    ei_q4_job* j = &s->jobs[m];
    ei_q4_quantize(j, 0);
    const size_t items = ei_q4_items(j);
    for (size_t i = 0; i < items; i++) ei_q4_work(j, i);
  }
}

// same compares every output of the set with ref (the generic variant's).
static int same(const char* v, int tile, set* s, float** ref) {
  for (int m = 0; m < s->n; m++) {
    const ei_q4_job* j = &s->jobs[m];
    const int64_t n = EI_Q4_Y(j);
    for (int64_t i = 0; i < n; i++)
      if (!(fabsf(j->y[i] - ref[m][i]) <= 1e-4f * (fabsf(ref[m][i]) + 1.0f))) {
        fprintf(stderr, "gemv_cache: %s%s: matrix %d output %lld is %g, generic's %g\n", v, tile ? "-tile" : "", m,
                (long long)i, j->y[i], ref[m][i]);
        return 0;
      }
  }
  return 1;
}

#define VARIANTS 8
#define ROUNDS 99

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 15, bits = argc > 2 ? atoi(argv[2]) : 4;
  if (rounds < 1 || rounds > ROUNDS || (bits != 4 && bits != 8)) {
    fprintf(stderr, "gemv_cache: want rounds 1..%d and bits 4 or 8\n", ROUNDS);
    return 2;
  }
  ei_q4_init(0, EI_Q4_PREFETCH_CPU);
  char list[256], *names[VARIANTS];
  int nv = 0, tile[VARIANTS];  // tile[v]: names[v] on its tile, printed "<name>-tile"
  snprintf(list, sizeof list, "%s", ei_q4_variants());
  for (char* t = strtok(list, ","); t != NULL && nv + 1 < VARIANTS; t = strtok(NULL, ",")) {
    if (strcmp(t, "generic") == 0) continue;
    names[nv] = t, tile[nv++] = 0;
    ei_q4_use(t);
    if (strcmp(ei_q4_gemv_tile(), EI_Q4_ON_TILE) != 0) names[nv] = t, tile[nv++] = 1;
  }

  static set l2, m50;
  add(&l2, 1536, 512, 0, bits);
  for (int l = 0; l < 6; l++) add(&m50, 1024, 512, 0, bits), add(&m50, 512, 512, 0, bits), add(&m50, 3072, 512, 1, bits), add(&m50, 512, 1536, 0, bits);
  add(&m50, 32000, 512, 0, bits);

  set* sets[2] = {&l2, &m50};
  const char* what[2] = {"l2", "50m"};
  const int reps[2] = {2000, 20};
  for (int s = 0; s < 2; s++) {  // every variant's outputs against generic's first
    ei_q4_use("generic");
    run(sets[s]);
    float* ref[MATS];
    for (int m = 0; m < sets[s]->n; m++) {
      const size_t n = (size_t)EI_Q4_Y(&sets[s]->jobs[m]);
      ref[m] = malloc(n * sizeof(float));
      memcpy(ref[m], sets[s]->jobs[m].y, n * sizeof(float));
    }
    for (int v = 0; v < nv; v++) {
      ei_q4_use(names[v]), ei_q4_gemv_on = !tile[v];
      for (int m = 0; m < sets[s]->n; m++)  // an output the variant leaves unwritten fails
        for (int64_t i = 0; i < EI_Q4_Y(&sets[s]->jobs[m]); i++) sets[s]->jobs[m].y[i] = NAN;
      run(sets[s]);
      if (!same(names[v], tile[v], sets[s], ref)) return 1;
    }
    for (int m = 0; m < sets[s]->n; m++) free(ref[m]);
  }

  static double t[2][VARIANTS][ROUNDS];
  for (int r = 0; r < rounds; r++)
    for (int s = 0; s < 2; s++)
      for (int v = 0; v < nv; v++) {
        ei_q4_use(names[v]), ei_q4_gemv_on = !tile[v];
        run(sets[s]);  // warm: this variant's code and the set's weights
        const double t0 = now();
        for (int i = 0; i < reps[s]; i++) run(sets[s]);
        t[s][v][r] = (now() - t0) / reps[s] * 1e6;
      }
  for (int s = 0; s < 2; s++) {
    double med[VARIANTS], best = 0;
    for (int v = 0; v < nv; v++) {
      qsort(t[s][v], (size_t)rounds, sizeof(double), by_value);
      med[v] = t[s][v][rounds / 2];
      if (v == 0 || med[v] < best) best = med[v];
    }
    for (int v = 0; v < nv; v++)
      printf("%s%s int%d %s: %.2f us (range %.2f-%.2f), %.2f x the fastest\n", names[v], tile[v] ? "-tile" : "", bits, what[s], med[v], t[s][v][0],
             t[s][v][rounds - 1], med[v] / best);
  }
  return 0;
}
