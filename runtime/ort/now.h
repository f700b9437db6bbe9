// ei_now_ns is the kernels' clock for kernel timing (ops.c's operators'
// wall time, matmul_q4.c's threads' time inside a product): monotonic
// nanoseconds.
#ifndef EDGEINFER_NOW_H
#define EDGEINFER_NOW_H

#include <time.h>

static inline long long ei_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

#endif
