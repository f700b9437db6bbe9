// The block-quantised row gather's interface to the operator glue (ops.c);
// nothing here knows ONNX Runtime.
#ifndef EDGEINFER_GATHER_BLOCKS_H
#define EDGEINFER_GATHER_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  const uint8_t* data;    // [V, H·bits/8]: int4 low nibble first, or int8
  const float* scales;    // [V, H/block]
  const int64_t* rows;    // [n]: each in [0, V) (ops.c wraps negative ones)
  float* out;             // [n, H]
  int64_t H, block, bits;  // bits 4 or 8
} ei_gather_job;

// Item i dequantises row rows[i] into out[i]: (code − zp)·scale, zp 8 for
// int4 and 128 for int8, as com.microsoft.GatherBlockQuantized computes
// it without zero points; items are independent.
void ei_gather_work(void* j, size_t i);

#endif
