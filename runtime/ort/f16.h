// Float32 to IEEE float16 in C, for the kernels' paths without F16C or
// NEON conversions: matmul_q4.c packs weight scales with it, and
// paged_attention.c writes float16 KV pools with it. It rounds as
// pkg/f16's FromFloat32 (and kvcache's scatter) does: to nearest, ties to
// even; beyond the range ±Inf; a NaN becomes the quiet NaN 0x7E00 with its
// sign (TestPagedAttentionWritesSlots compares the bits).
#ifndef EDGEINFER_F16_H
#define EDGEINFER_F16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t ei_f16_from_float(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7FFFFFFF;
  if (ax >= 0x47800000) return (uint16_t)(sign | (ax > 0x7F800000 ? 0x7E00 : 0x7C00));  // overflow, inf, nan
  if (ax < 0x38800000) {  // a subnormal half (or zero)
    const float a = fabsf(f) * 16777216.0f;  // 2^24: units of the smallest subnormal
    return (uint16_t)(sign | (uint32_t)rintf(a));
  }
  const uint32_t e = ax + 0xC8000FFF + ((ax >> 13) & 1);  // rebias, round to nearest even
  return (uint16_t)(sign | (e >> 13));
}

#endif
