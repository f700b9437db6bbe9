// The q/k/v split and rotary kernel's interface to the operator glue
// (ops.c); nothing here knows ONNX Runtime.
#ifndef EDGEINFER_ROTARY_QKV_H
#define EDGEINFER_ROTARY_QKV_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  const float* qkv;      // [B, T, (Hq + 2·Hkv)·D]: one stacked projection
  const int64_t* pos;    // [B, T]
  const float *cos, *sin;  // [P, D/2]
  int64_t B, T, Hq, Hkv, D, P;
  float *q, *k, *v;      // [B, T, Hq·D], [B, T, Hkv·D] ×2: q and k rotated
  float *kh, *vh;        // [B, Hkv, T, D] ×2: k (rotated) and v, head-major (NULL: not wanted)
  int64_t bad;           // set to 1 + the index of a position outside [0, P)
} ei_rotary_job;

// Item i is token i of the B·T; items are independent.
void ei_rotary_work(void* j, size_t i);

#endif
