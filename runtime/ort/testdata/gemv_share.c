// BenchmarkGEMVShare's program: the kernel's products over one decode
// step's weights of synthetic-1b (16 layers of q/k/v, o, gate/up and down
// projections, and lm_head: 584 MB packed in int4, 1,104 MB in int8, far
// above any L3 a board has), on two threads (or the count given), against
// a read loop over the same bytes on the same threads, alternated round by
// round. Prints, per variant this CPU runs and for rows = 1 (a batch-1
// decode step) and 8, the medians of the kernel's and the read loop's GB/s
// and of their per-round ratio (the share of the read bandwidth the kernel
// reached), with the kernel's batches handed out in order and split by
// regions for the threads (ei_q4_plan), both in each round. Weights are in
// 2 MiB pages where the kernel allows (the engine's sessions are:
// hugepages.go). A variant whose product disagrees with a double reference
// (check) ends the program with status 1 before any of its figures print.
//
// One thread is what a core streams by itself: where two threads' read
// loop takes more of the bus than twice the kernel's one-thread rate, the
// two-thread share is bounded by the core, not the bus
// (BenchmarkGEMVShare runs both).
//
//   gemv_share [rounds [bits [threads]]]    (bits 4, the default, or 8;
//                                            threads 2, the default, up to
//                                            the CPUs it may run on)
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../matmul_q4.h"
#include "../orttest/readloop.h"
#include "kernel_program.h"

#define MAX_THREADS 16
static int threads = 2;
#define MATS 65

static ei_q4_job jobs[MATS];
static size_t bytes[MATS];
static int reading;  // this round times the read loop, not the kernel
static int cur;
static atomic_int phase, done;
static atomic_long next_batch;
static volatile long sink;

// readloop is the read loop the shares are taken against: the one
// ReadBandwidth runs beside the engine's benchmarks (orttest/readloop.h).
static void readloop(const uint8_t* p, size_t n) { sink += (long)ei_read(p, n); }

// relax is the spin wait's pause.
#if defined(__x86_64__)
#include <immintrin.h>
static inline void relax(void) { _mm_pause(); }
#elif defined(__aarch64__)
static inline void relax(void) { __asm__ volatile("yield"); }
#else
#error "gemv_share: a spin wait for x86-64 or arm64 only"
#endif

// share runs thread tid's part of matrix cur: the read loop's half of its
// bytes, or the kernel's batches (ei_q4_plan's, for `layout` threads),
// each to the first thread free.
static int layout;
static void share(int tid) {
  ei_q4_job* j = &jobs[cur];
  if (reading) {
    size_t lines = bytes[cur] / 64, lo = lines * (size_t)tid / (size_t)threads * 64,
           hi = lines * (size_t)(tid + 1) / (size_t)threads * 64;
    readloop(j->w + lo, hi - lo);
    return;
  }
  for (long b; (b = atomic_fetch_add(&next_batch, 1)) < (long)j->batches;) ei_q4_batch(j, (size_t)b);
}

static void* worker(void* arg) {
  int tid = (int)(intptr_t)arg, seen = 0;
  for (;;) {
    int ph;
    while ((ph = atomic_load(&phase)) == seen) relax();
    if (ph < 0) return NULL;
    seen = ph;
    share(tid);
    atomic_fetch_add(&done, 1);
  }
}

// step times every matrix once, the threads meeting after each as a
// graph's nodes do.
static double step(void) {
  double t0 = now();
  for (cur = 0; cur < MATS; cur++) {
    if (!reading) ei_q4_plan(&jobs[cur], layout);
    atomic_store(&next_batch, 0), atomic_store(&done, 0);
    atomic_fetch_add(&phase, 1);
    share(0);
    while (atomic_load(&done) < threads - 1) relax();
  }
  return now() - t0;
}

// huge_alloc maps n bytes at a 2 MiB boundary, advised into 2 MiB pages
// before anything touches them. Why a mapping of its own: memory from
// malloc may be heap the program already touched (glibc raises its mmap
// threshold after a large free, and the unpacked codes freed above are
// large), whose 4 KiB pages the advice does not turn into huge ones; then
// every weight read pays a page walk the engine's sessions do not
// (hugepages.go). The kernel, whose loads wait on its arithmetic, hides
// those walks worse than the read loop: this program built with one thread
// gave it a smaller share of the bus in 4 KiB pages than in 2 MiB ones.
// main prints how much of the process Linux put in 2 MiB pages.
static uint8_t* huge_alloc(size_t n) {
  const size_t huge = 2u << 20, mapped = (n + huge - 1) & ~(huge - 1);
  uint8_t* m = mmap(NULL, mapped + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  uint8_t* w = (uint8_t*)(((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1));
  madvise(w, mapped, MADV_HUGEPAGE);
  return w;
}

// huge_mb is this process's anonymous memory in transparent huge pages, in
// MB (/proc/self/smaps_rollup), or -1 where the kernel does not say.
static double huge_mb(void) {
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  if (f == NULL) return -1;
  char line[256];
  double kb = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "AnonHugePages: %lf kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : kb * 1024 / 1e6;
}

// check compares the last row matrix 0's product wrote with the same
// product in double from the unpacked weights (MatMulNBits' layout: zero
// point 8 or 128, low nibble first): a share is only worth printing for a
// kernel that computed the product. (Scratch laid out for no rows once
// overlapped the activations with their scales, and the garbage scales'
// denormal assists, not the memory, set an Intel host's figures.)
static uint8_t* b0;
static float* sc0;
static int check(const char* v, int bits, const float* a, int rows) {
  const ei_q4_job* j = &jobs[0];
  const int r = rows - 1;
  double err = 0, norm = 0;
  for (int64_t n = 0; n < j->N; n++) {
    double ref = 0;
    for (int64_t k = 0; k < j->K; k++) {
      const int64_t blk = n * j->nb + k / 32;
      int q = bits == 4 ? (b0[blk * 16 + (k % 32) / 2] >> (4 * (k % 2))) & 15 : b0[blk * 32 + k % 32];
      ref += (double)a[r * j->K + k] * (q - (bits == 4 ? 8 : 128)) * sc0[blk];
    }
    const double d = j->y[r * j->N + n] - ref;
    err += d * d, norm += ref * ref;
  }
  if (!(err <= 1e-3 * norm)) {
    fprintf(stderr, "gemv_share: %s rows %d: product off by %.3g relative (root mean square) from the reference\n", v, rows,
            sqrt(err / norm));
    return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 9;
  if (rounds < 1 || rounds > 100) rounds = 9;
  const int bits = argc > 2 ? atoi(argv[2]) : 4;
  if (bits != 4 && bits != 8) {
    fprintf(stderr, "gemv_share: bits %s: want 4 or 8\n", argv[2]);
    return 2;
  }
  // at most the CPUs it may run on: the threads wait for each other
  // spinning, and one that shares a CPU stalls every step
  cpu_set_t cpus;
  const int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  if (argc > 3) threads = atoi(argv[3]);
  if (threads < 1 || threads > MAX_THREADS || threads > ncpu) {
    fprintf(stderr, "gemv_share: threads %d: want 1 to %d (the CPUs it may run on)\n", threads,
            ncpu < MAX_THREADS ? ncpu : MAX_THREADS);
    return 2;
  }
  ei_q4_init(0, EI_Q4_PREFETCH_CPU);
  const int64_t H = 2048, I = 8192, V = 32000, KV = 1024;
  int64_t shapes[MATS][2];
  for (int l = 0; l < 16; l++) {
    int64_t s[4][2] = {{H + KV, H}, {H, H}, {2 * I, H}, {H, I}};
    memcpy(shapes[4 * l], s, sizeof s);
  }
  shapes[MATS - 1][0] = V, shapes[MATS - 1][1] = H;
  size_t total = 0;
  float* a = malloc(8 * I * sizeof(float));
  for (int64_t i = 0; i < 8 * I; i++) a[i] = (float)rnd() / 4294967296.0f - 0.5f;
  for (int m = 0; m < MATS; m++) {
    int64_t N = shapes[m][0], K = shapes[m][1], nb = K / 32;
    uint8_t* b = malloc((size_t)(N * nb * 4 * bits));
    float* sc = malloc((size_t)(N * nb) * sizeof(float));
    for (int64_t k = 0; k < N * nb * 4 * bits; k++) b[k] = (uint8_t)rnd();
    for (int64_t k = 0; k < N * nb; k++) sc[k] = 1.0f / 64;
    bytes[m] = ei_q4_packed_size(bits, 1, N, nb);
    uint8_t* w = huge_alloc(bytes[m]);
    if (w == NULL) return 2;
    ei_q4_pack(bits, 1, 0, b, sc, N, nb, w);
    if (m == 0)
      b0 = b, sc0 = sc;
    else
      free(b), free(sc);
    ei_q4_job j = {0};
    j.bits = bits, j.f16 = 1, j.N = N, j.K = K, j.nb = nb, j.a = a, j.w = w;
    j.M = 8;  // ei_q4_bind lays the scratch out for the most rows run below
    j.y = malloc((size_t)(8 * N) * sizeof(float));
    void* scratch = malloc(ei_q4_scratch(8, nb));
    ei_q4_bind(&j, scratch);
    jobs[m] = j;
    total += bytes[m];
  }
  pthread_t th[MAX_THREADS];
  for (int t = 1; t < threads; t++) pthread_create(&th[t], NULL, worker, (void*)(intptr_t)t);
  printf("int%d weights %.1f MB (%.1f MB of the process in 2 MiB pages), %d threads, %d rounds; gemv: %s\n", bits,
         (double)total / 1e6, huge_mb(), threads, rounds, ei_q4_gemv());
  char list[256];
  snprintf(list, sizeof list, "%s", ei_q4_variants());
  for (char* v = strtok(list, ","); v != NULL; v = strtok(NULL, ",")) {
    if (strcmp(v, "generic") == 0) continue;
    ei_q4_use(v);
    for (int rows = 1; rows <= 8; rows += 7) {
      for (int m = 0; m < MATS; m++) {
        jobs[m].M = rows;
        for (int64_t i = 0; i < rows; i++) ei_q4_quantize(&jobs[m], (size_t)i);
      }
      // each round: the read loop, then the kernel's batches in order and
      // split by regions for the threads, in turns
      double kern[2][100], rd[100], ratio[2][100];
      step(), reading = 1, step(), reading = 0;  // warm
      if (!check(v, bits, a, rows)) return 1;
      for (int r = 0; r < rounds; r++) {
        reading = 1;
        double tr = step();
        reading = 0;
        rd[r] = (double)total / tr / 1e9;
        for (int k = 0; k < 2; k++) {
          const int l = (k + r) % 2;
          layout = l ? threads : 0;
          double tk = step();
          kern[l][r] = (double)total / tk / 1e9, ratio[l][r] = tr / tk;
        }
      }
      qsort(rd, (size_t)rounds, sizeof(double), by_value);
      for (int l = 0; l < 2; l++) {
        qsort(kern[l], (size_t)rounds, sizeof(double), by_value);
        qsort(ratio[l], (size_t)rounds, sizeof(double), by_value);
        printf("%s rows %d %s: kernel %.1f GB/s, read %.1f GB/s, share %.3f (range %.3f-%.3f)\n", v, rows,
               l ? "by regions" : "in order", kern[l][rounds / 2], rd[rounds / 2], ratio[l][rounds / 2], ratio[l][0],
               ratio[l][rounds - 1]);
      }
    }
  }
  atomic_store(&phase, -1);
  for (int t = 1; t < threads; t++) pthread_join(th[t], NULL);
  return 0;
}
