// IEEE float16 in C, both ways, for the kernels' paths without F16C or
// NEON conversions: matmul_q4.c packs and reads weight scales with them,
// paged_attention.c writes and reads float16 KV pools.
//
// ei_f16_from_float rounds as pkg/f16's FromFloat32 (and kvcache's
// scatter) does: to nearest, ties to even; beyond the range ±Inf; a NaN
// becomes the quiet NaN 0x7E00 with its sign (TestPagedAttentionWritesSlots
// compares the bits).
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

// ei_f16_to_float widens float16 bits exactly, branch-free so that a loop of
// it vectorises on every target: the exponent and mantissa shifted into
// float32 place and scaled by 2^112 (which also turns a float16 subnormal
// into its float32 value), then infinities and NaNs (payload kept) given
// float32's all-ones exponent, then the sign.
static inline float ei_f16_to_float(uint16_t h) {
  union {
    uint32_t u;
    float f;
  } v;
  const uint32_t em = h & 0x7fffu;
  v.u = em << 13;
  v.f *= 0x1p112f;
  v.u |= em >= 0x7c00u ? 0x7f800000u : 0u;
  v.u |= (uint32_t)(h & 0x8000u) << 16;
  return v.f;
}

#endif
