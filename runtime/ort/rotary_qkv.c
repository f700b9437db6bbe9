// ai.edgeinfer.RotaryQKV: the step between a decoder layer's stacked q/k/v
// projection and PagedAttention in one node — split the projection, apply
// rotary position embeddings to q and k (com.microsoft.RotaryEmbedding's
// arithmetic, interleaved 0: element j and j + D/2 of a head rotate by the
// angle of position pos and frequency j), and write the step's keys and
// values also head-major, the layout of the paged contract's new_keys and
// new_values outputs.
//
// Why one node: at batch 1 the standard spelling (Split, two
// RotaryEmbedding, two Reshape, two Transpose) is seven nodes a layer whose
// arithmetic is a few thousand multiply-adds; ONNX Runtime spends more on
// dispatching them than on computing (quant's TestProfileDecodeAndPrefill
// lists them).

#include <string.h>

#include "rotary_qkv.h"

// rotate writes heads of x (each D long) into out, rotated at row p of the
// caches: out[j] = x[j]·cos − x[j+h]·sin, out[j+h] = x[j+h]·cos + x[j]·sin.
static void rotate(const float* x, float* out, int64_t heads, int64_t D, const float* cos, const float* sin) {
  const int64_t h = D / 2;
  for (int64_t n = 0; n < heads; n++, x += D, out += D)
    for (int64_t j = 0; j < h; j++) {
      const float a = x[j], b = x[j + h];
      out[j] = a * cos[j] - b * sin[j];
      out[j + h] = b * cos[j] + a * sin[j];
    }
}

void ei_rotary_work(void* p, size_t i) {
  ei_rotary_job* j = p;
  const int64_t b = (int64_t)i / j->T, t = (int64_t)i % j->T, D = j->D;
  const int64_t pos = j->pos[i];
  if (pos < 0 || pos >= j->P) {
    __atomic_store_n(&j->bad, (int64_t)i + 1, __ATOMIC_RELAXED);
    return;
  }
  const float* row = j->qkv + (int64_t)i * (j->Hq + 2 * j->Hkv) * D;
  const float *cos = j->cos + pos * (D / 2), *sin = j->sin + pos * (D / 2);
  float* q = j->q + (int64_t)i * j->Hq * D;
  float* k = j->k + (int64_t)i * j->Hkv * D;
  float* v = j->v + (int64_t)i * j->Hkv * D;
  rotate(row, q, j->Hq, D, cos, sin);
  rotate(row + j->Hq * D, k, j->Hkv, D, cos, sin);
  memcpy(v, row + (j->Hq + j->Hkv) * D, (size_t)(j->Hkv * D) * sizeof(float));
  if (j->kh == NULL) return;  // PagedAttention writing the pools itself
  for (int64_t h = 0; h < j->Hkv; h++) {
    const int64_t at = ((b * j->Hkv + h) * j->T + t) * D;
    memcpy(j->kh + at, k + h * D, (size_t)D * sizeof(float));
    memcpy(j->vh + at, v + h * D, (size_t)D * sizeof(float));
  }
}
