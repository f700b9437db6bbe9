// The int4 matrix kernel's interface to the operator glue (ops.c); nothing
// here knows ONNX Runtime.
#ifndef EDGEINFER_MATMUL_Q4_H
#define EDGEINFER_MATMUL_Q4_H

#include <stddef.h>
#include <stdint.h>

// Weights in com.microsoft.MatMulNBits' layout for bits 4, block 32, no
// zero points: b [N, nb, 16] (low nibble = even element, code 8 = zero),
// scales [N, nb], nb = ceil(K/32).
#define EI_Q4_BLOCK 32

typedef struct {
  const float* a;  // [M, K]
  float* y;        // [M, N]
  const uint8_t* b;
  const float* scales;
  int64_t M, N, K, nb;
  // Activations quantised per block of 32 (ei_q4_quantize fills them):
  // codes reordered to the weights' nibble order (even elements, then odd),
  // the block's scale, and 8·scale·Σcodes, the zero point's share.
  int8_t* qa;  // [M, nb, 32]
  float *sa, *za;  // [M, nb]
  float* sa8;      // [M, nb/2, 8]: a pair of blocks' scales, each over four lanes
  // Work split (ei_q4_items sets them).
  int64_t row_tiles, col_chunks, chunk;
} ei_q4_job;

// ei_q4_scratch is the bytes of scratch a job of M rows needs for qa, sa,
// za and sa8; ei_q4_bind points them into scratch (64-byte aligned).
size_t ei_q4_scratch(int64_t M, int64_t nb);
void ei_q4_bind(ei_q4_job* j, void* scratch);
// First pass: item i quantises row i of a (M items).
void ei_q4_quantize(void* j, size_t i);
// Second pass: ei_q4_items work items of the product.
size_t ei_q4_items(ei_q4_job* j);
void ei_q4_work(void* j, size_t i);

// Variants, as the attention kernel's (paged_attention.h).
void ei_q4_init(void);
const char* ei_q4_variants(void);
const char* ei_q4_compiled(void);
const char* ei_q4_current(void);
int ei_q4_use(const char* name);

#endif
