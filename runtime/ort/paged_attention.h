// The paged attention kernel's interface to the operator glue (ops.c).
// Nothing here knows ONNX Runtime: ops.c checks the tensors, fills a job and
// hands its work items to ONNX Runtime's thread pool.
#ifndef EDGEINFER_PAGED_ATTENTION_H
#define EDGEINFER_PAGED_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

// Tokens of one row handled by one work item: enough query rows to reuse
// each key and value read from memory several times in prefill, few
// enough that a decode step (T = 1) still splits over the KV heads.
#define EI_TOKEN_BLOCK 4
// Query heads per KV head the kernel handles (checked when a node loads).
#define EI_MAX_GROUP 64
// EI_WIDE_MAX bounds an int8 block widened to floats for the fast loops
// (block size × head size; larger blocks take the int8 loops).
#define EI_WIDE_MAX 4096

typedef struct {
  const float *q, *k, *v;
  const void *kc, *vc;  // pools
  const float *ks, *vs; // int8 pools: per-block scales [Hkv, N]
  const int64_t *bt, *cl;
  // slots [B, T] (NULL: the caller scatters): token t of row b's key and
  // value go into pool slot slots[b·T + t] (block · bs + offset; negative:
  // none, a padding position) of kdst and vdst, the pools kc and vc.
  const int64_t* slots;
  void *kdst, *vdst;
  float* out;
  int64_t B, T, Hq, Hkv, G, D, N, bs, M;
  int64_t token_blocks;
  int int8;             // pools are int8 with per-block scales
  int f16;              // pools are IEEE float16
  float scale;
  int64_t max_keys;  // max over rows of context_lens + T
  int failed;        // set by a work item that could not get memory
  // Prefill (T ≥ EI_PREFILL_TOKENS): each (row, KV head)'s keys, cached and
  // new, gathered once by ei_attention_prep into kt, transposed in chunks
  // of 16 keys ([Lp/16][D][16], EI_KT: one vector holds element d of 16
  // keys, and a chunk is contiguous), and its values into vt [Lp][D],
  // float, zero past the row's keys; Lp is max_keys rounded up to 16.
  // ops.c allocates them (ei_attention_prep_bytes), 64-byte aligned.
  float *kt, *vt;
  int64_t Lp;
} ei_attention_job;

#define EI_KT(c, d, D) ((((c) >> 4) * (D) + (d)) * 16 + ((c)&15))

// Steps of at least this many tokens per row take the prefill path.
#define EI_PREFILL_TOKENS 8

// ei_attention_prep_bytes is the scratch a job's prefill path needs (0:
// the job does not take it; it sets Lp); ei_attention_prep fills item i
// (row i / Hkv, KV head i % Hkv) of B·Hkv, before any ei_attention_work.
size_t ei_attention_prep_bytes(ei_attention_job* j);
void ei_attention_prep(void* j, size_t i);

// ei_attention_items is the number of work items of a filled job (it sets
// j->token_blocks); ei_attention_work runs item i. Items are independent.
size_t ei_attention_items(ei_attention_job* j);
void ei_attention_work(void* j, size_t i);

// Variants: the loops compiled for one instruction set, with or without
// the hand-written AVX2 loops for head sizes that are a multiple of 16.
// ei_attention_init picks the best the CPU runs; ei_attention_variants lists
// those it can run, comma-separated (ei_attention_compiled: all that were
// built), and ei_attention_use switches to one (tests run each against the
// others; 0, or -1 for a name the CPU cannot run). off: the instruction
// sets switched off (cpu.h), left out as if the CPU lacked them.
void ei_attention_init(unsigned off);
const char* ei_attention_variants(void);
const char* ei_attention_compiled(void);
const char* ei_attention_current(void);
int ei_attention_use(const char* name);

// ei_attention_prefetch_on (1 unless a benchmark turns it off): an item
// with cached tokens fetches its next key block, and then its next value
// block, ahead of their use.
extern int ei_attention_prefetch_on;

#endif
