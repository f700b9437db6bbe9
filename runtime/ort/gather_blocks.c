// ai.edgeinfer.GatherBlockQuantized: the rows of an int4 or int8 table
// quantised in blocks along each row, dequantised — a quantised model's
// token embedding. com.microsoft.GatherBlockQuantized's inputs and
// attributes, for uint8 data, bits 4 or 8, gather_axis 0, the last axis
// quantised and no zero points; the same floats.
//
// Why our own: ONNX Runtime's computes every element's scale index with
// three divisions and looks each row up in a per-thread hash map; a
// 256-token prefill chunk of synthetic-110m spent ~1 ms of its ~45 in it
// and a decode step ~15 µs (quant's TestProfileDecodeAndPrefill lists the
// node), where a row is a few hundred bytes to widen.

#include "gather_blocks.h"

void ei_gather_work(void* p, size_t i) {
  const ei_gather_job* j = p;
  const int64_t H = j->H, nb = H / j->block, r = j->rows[i];
  const float* s = j->scales + r * nb;
  float* y = j->out + (int64_t)i * H;
  if (j->bits == 8) {
    const uint8_t* q = j->data + r * H;
    for (int64_t b = 0; b < nb; b++)
      for (int64_t k = b * j->block; k < (b + 1) * j->block; k++) y[k] = (float)((int32_t)q[k] - 128) * s[b];
    return;
  }
  const uint8_t* q = j->data + r * (H / 2);
  for (int64_t b = 0; b < nb; b++)
    for (int64_t k = b * j->block; k < (b + 1) * j->block; k += 2) {
      const uint8_t c = q[k / 2];
      y[k] = (float)((int32_t)(c & 0x0F) - 8) * s[b];
      y[k + 1] = (float)((int32_t)(c >> 4) - 8) * s[b];
    }
}
