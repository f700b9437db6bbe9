// What the kernel's benchmark programs (gemv_share.c, gemv_cache.c) share:
// the kernels' clock in seconds, seeded random codes, and qsort's order for
// medians.
#ifndef EDGEINFER_KERNEL_PROGRAM_H
#define EDGEINFER_KERNEL_PROGRAM_H
#include <stdint.h>

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
#endif
