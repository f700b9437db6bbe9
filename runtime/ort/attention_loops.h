// The paged attention kernel's loops, included by paged_attention.c once
// per instruction set it compiles them for (no include guard on purpose):
// EI_SFX names the copy, and a `#pragma GCC target` around the include
// tells the compiler what it may use. Written so that the compiler
// vectorises them without reassociation flags: eight independent lanes,
// summed at the end.

#define EI_CAT2(a, b) a##_##b
#define EI_CAT(a, b) EI_CAT2(a, b)
#define EI_FN(name) EI_CAT(name, EI_SFX)

static inline float EI_FN(dot_f32)(const float* restrict a, const float* restrict b, int64_t n) {
  float acc[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

static inline void EI_FN(axpy_f32)(float* restrict y, float w, const float* restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += w * x[i];
}

// exp for x in [-87, 0] (scores minus their maximum, clamped by the
// caller): Cephes' expf polynomial with the exponent put in by bit
// arithmetic, branch-free so a row vectorises. Relative error ~2e-7.
static inline float EI_FN(exp_neg)(float x) {
  // n = round(x·log2 e) by the 1.5·2^23 trick, not floorf(·+0.5): a call
  // or a branch where SSE4.1 is not assumed, which kept the row's loop
  // from vectorising (a tie rounds to even; r stays within ±ln2/2 either way)
  float fx = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union { int32_t i; float f; } e;
  e.i = ((int32_t)fx + 127) << 23;
  return p * e.f;
}

// softmax_num turns a row of n ≥ 1 scores into its softmax numerators
// exp(s − max) in place and returns their sum: three loops the compiler
// vectorises (eight lanes for the max and the sum, a map for exp), where
// one loop carrying the sum ran exp one score at a time — most of a
// prefill chunk's attention (TestProfileDecodeAndPrefill).
static inline float EI_FN(softmax_num)(float* restrict s, int64_t n) {
  float m[8];
  for (int l = 0; l < 8; l++) m[l] = s[0];
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int l = 0; l < 8; l++) m[l] = s[c + l] > m[l] ? s[c + l] : m[l];
  float mx = m[0];
  for (int l = 1; l < 8; l++) mx = m[l] > mx ? m[l] : mx;
  for (; c < n; c++) mx = s[c] > mx ? s[c] : mx;
  // the clamp in a loop of its own: with it, GCC vectorised the exp loop
  // for AVX-512 (masks) but not for AVX2
  for (c = 0; c < n; c++) s[c] = s[c] - mx < -87.0f ? -87.0f : s[c] - mx;
  for (c = 0; c < n; c++) s[c] = EI_FN(exp_neg)(s[c]);
  float a[8] = {0};
  for (c = 0; c + 8 <= n; c += 8)
    for (int l = 0; l < 8; l++) a[l] += s[c + l];
  float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  for (; c < n; c++) sum += s[c];
  return sum;
}

// The two inner loops as functions of a run of keys (score_fn, value_fn in
// paged_attention.c), over float keys and values.
static void EI_FN(score_f32)(const float* const* q, int64_t rows, const void* k, int64_t step, int64_t n,
                             int64_t D, float scale, float* s, int64_t stride, int64_t col0) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t r = 0; r < rows; r++)
      s[r * stride + col0 + i] = scale * EI_FN(dot_f32)(q[r], (const float*)k + i * step, D);
}

static void EI_FN(value_f32)(float* const* o, int64_t rows, const void* v, int64_t step, int64_t n, int64_t D,
                             float w, const float* s, int64_t stride, int64_t col0) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t r = 0; r < rows; r++)
      EI_FN(axpy_f32)(o[r], w * s[r * stride + col0 + i], (const float*)v + i * step, D);
}

// widen_f16 is n float16 values as floats: eight at a time by the
// conversion instructions where the copy's target has them (F16C in
// x86-64-v3 and v4, NEON's fcvtl on arm64), ei_f16_to_float (f16.h) for
// the rest. (That alone,
// though it vectorises, made float16 pools twice as slow as float ones:
// BenchmarkPagedAttentionDecode -f16.)
static inline void EI_FN(widen_f16)(const uint16_t* restrict x, float* restrict y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i))));
#elif defined(__aarch64__)
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))));
#endif
  for (; i < n; i++) y[i] = ei_f16_to_float(x[i]);
}

// widen_i8 is n int8 codes as floats (vectorised: sign-extend, convert).
static inline void EI_FN(widen_i8)(const int8_t* restrict x, float* restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
}

// widen is n elements of a reduced pool (int8 or float16) as floats.
static inline void EI_FN(widen)(const ei_attention_job* j, const void* x, float* y, int64_t n) {
  if (j->f16)
    EI_FN(widen_f16)(x, y, n);
  else
    EI_FN(widen_i8)(x, y, n);
}

// fetch asks for block blk of a pool (blocks of n bytes) to be brought
// into the cache ahead of its use.
static inline void EI_FN(fetch)(const void* pool, int64_t blk, size_t n) {
  const char* p = (const char*)pool + blk * n;
  for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, 3);
}

// attend computes one work item: row b, KV head h, tokens [t0, t1), i.e.
// the G query heads of h for each of those tokens. s holds one score row
// of max_keys floats per query row. fast's loops, where not NULL, replace
// the float loops (fast->score[0], value[0]) and a float16 pool's (the [1]s)
// for head sizes that are a multiple of 16.
static void EI_FN(attend)(const ei_attention_job* j, int64_t b, int64_t h, int64_t t0, int64_t t1, float* s,
                          const fast_loops* fl) {
  const int64_t G = j->G, D = j->D, bs = j->bs, ctx = j->cl[b];
  const int64_t rows = (t1 - t0) * G, stride = j->max_keys;
  const float* q[EI_TOKEN_BLOCK * EI_MAX_GROUP];
  float* o[EI_TOKEN_BLOCK * EI_MAX_GROUP];
  item_rows(j, b, h, t0, t1, q, o);

  const int fast = D % 16 == 0 && fl->score[0] != NULL;
  score_fn score = fast ? fl->score[0] : EI_FN(score_f32);
  value_fn value = fast ? fl->value[0] : EI_FN(value_f32);
  const size_t elem = j->int8 ? 1 : j->f16 ? 2 : sizeof(float);
  const int64_t* table = j->bt + b * j->M;
  // The pool's blocks are read by the float loops. An int8 or float16
  // block is widened to floats first, into wide, up to `chunk` slots at a
  // time: loops that converted each key once per query row kept no tile in
  // registers, and made an int8 cache slower than a float one at every
  // context though it reads a quarter of the bytes (BenchmarkDecodeKVInt8
  // in runtime/internal/llm; BenchmarkPagedAttentionDecode -int8). Where a
  // hand-written loop reads float16 itself, widening eight elements as it
  // loads them, it reads the pool directly (BenchmarkPagedAttentionDecode
  // -f16: no pass of its own).
  const int fast16 = j->f16 && fast && fl->score[1] != NULL;
  score_fn pool_score = fast16 ? fl->score[1] : score;
  value_fn pool_value = fast16 ? fl->value[1] : value;
  const int widen = (j->int8 || j->f16) && !fast16;
  float wide[EI_WIDE_MAX];
  const int64_t chunk = EI_WIDE_MAX / D;  // ≥ 1: ops.c refuses a head size above EI_WIDE_MAX

  // Scores against the cached slots, block by block through the table,
  // then against this step's keys: token t sees t' ≤ t, so the keys before
  // the item's first token are one run for every row (Hkv·D floats apart
  // in key), and new key tk ≥ t0 is scored by the rows of tokens tk.. — a
  // suffix of the rows. (One key at a time throughout, a 256-token prefill
  // chunk spent twice as long in attention: TestProfileDecodeAndPrefill.)
  //
  // Each pass over the table fetches its next block while it reads one: in
  // a decode step the pools come from memory (the step's weights, streamed
  // since this layer last ran, pushed them out of the cache), and an item's
  // blocks are too short a run for the hardware prefetchers to ramp up. (A
  // prefill chunk after cached tokens fetches the same way: one prefetch a
  // line, against the chunk's rows of arithmetic per block.)
  // The values are fetched by their own pass, not beside the keys: at long
  // contexts values fetched that early left the cache before their use
  // (BenchmarkPagedAttentionCold, with and without, contexts 128 and 2048).
  const size_t block_bytes = (size_t)(bs * D) * elem;
  const int64_t head = h * j->N;  // this KV head's blocks in the pools
  const int prefetch = ei_attention_prefetch_on && ctx > 0;
  if (prefetch) EI_FN(fetch)(j->kc, head + table[0], block_bytes);
  for (int64_t m = 0; m * bs < ctx; m++) {
    int64_t blk = head + table[m], n = ctx - m * bs < bs ? ctx - m * bs : bs;
    const void* kb = (const char*)j->kc + blk * block_bytes;
    const float sc = j->int8 ? j->scale * j->ks[blk] : j->scale;
    if (prefetch && (m + 1) * bs < ctx) EI_FN(fetch)(j->kc, head + table[m + 1], block_bytes);
    if (!widen) {
      pool_score(q, rows, kb, D, n, D, sc, s, stride, m * bs);
      continue;
    }
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
      const int64_t c = n - c0 < chunk ? n - c0 : chunk;
      EI_FN(widen)(j, (const char*)kb + c0 * D * elem, wide, c * D);
      score(q, rows, wide, D, c, D, sc, s, stride, m * bs + c0);
    }
  }
  const int64_t kstep = j->Hkv * D;
  const float *keys = j->k + (b * j->T * j->Hkv + h) * D, *values = j->v + (b * j->T * j->Hkv + h) * D;
  if (t0 > 0) score(q, rows, keys, kstep, t0, D, j->scale, s, stride, ctx);
  for (int64_t tk = t0; tk < t1; tk++) {
    int64_t first = (tk - t0) * G;
    score(q + first, rows - first, keys + tk * kstep, 0, 1, D, j->scale, s + first * stride, stride, ctx + tk);
  }

  // Softmax numerators in place; each row's sum is divided out at the end.
  float inv[EI_TOKEN_BLOCK * EI_MAX_GROUP];
  for (int64_t r = 0; r < rows; r++) {
    inv[r] = 1.0f / EI_FN(softmax_num)(s + r * stride, ctx + t0 + r / G + 1);
    memset(o[r], 0, (size_t)D * sizeof(float));
  }

  // Weighted values: cached slots, then this step's.
  if (prefetch) EI_FN(fetch)(j->vc, head + table[0], block_bytes);
  for (int64_t m = 0; m * bs < ctx; m++) {
    int64_t blk = head + table[m], n = ctx - m * bs < bs ? ctx - m * bs : bs;
    const void* vb = (const char*)j->vc + blk * block_bytes;
    if (prefetch && (m + 1) * bs < ctx) EI_FN(fetch)(j->vc, head + table[m + 1], block_bytes);
    const float w = j->int8 ? j->vs[blk] : 1.0f;
    if (!widen) {
      pool_value(o, rows, vb, D, n, D, w, s, stride, m * bs);
      continue;
    }
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
      const int64_t c = n - c0 < chunk ? n - c0 : chunk;
      EI_FN(widen)(j, (const char*)vb + c0 * D * elem, wide, c * D);
      value(o, rows, wide, D, c, D, w, s, stride, m * bs + c0);
    }
  }
  if (t0 > 0) value(o, rows, values, kstep, t0, D, 1.0f, s, stride, ctx);
  for (int64_t tk = t0; tk < t1; tk++) {
    int64_t first = (tk - t0) * G;
    value(o + first, rows - first, values + tk * kstep, 0, 1, D, 1.0f, s + first * stride, stride, ctx + tk);
  }
  for (int64_t r = 0; r < rows; r++)
    for (int64_t d = 0; d < D; d++) o[r][d] *= inv[r];
}

// The prefill path's two loops (pscore_fn, pvalue_fn in paged_attention.c),
// over a (row, KV head)'s gathered keys: s[r][c] = scale·q[r]·kt[·][c] for
// keys c < n (n a multiple of 16), and o[r] = Σ_c s[r][c]·v[c]. Sixteen
// keys' scores of four rows at a time, each an FMA of one query element
// by sixteen keys' (no horizontal sums), as the compiler vectorises them.
static void EI_FN(pscore)(const float* const* q, int64_t rows, const float* kt, int64_t n, int64_t D,
                          float scale, float* s, int64_t stride) {
  for (int64_t r0 = 0; r0 < rows; r0 += 4) {
    const int64_t R = rows - r0 < 4 ? rows - r0 : 4;
    for (int64_t c0 = 0; c0 < n; c0 += 16) {
      float acc[4][16] = {{0}};
      for (int64_t d = 0; d < D; d++) {
        const float* kd = kt + c0 * D + d * 16;
        for (int64_t r = 0; r < R; r++) {
          const float x = q[r0 + r][d];
          for (int c = 0; c < 16; c++) acc[r][c] += x * kd[c];
        }
      }
      for (int64_t r = 0; r < R; r++)
        for (int c = 0; c < 16; c++) s[(r0 + r) * stride + c0 + c] = scale * acc[r][c];
    }
  }
}

static void EI_FN(pvalue)(float* const* o, int64_t rows, const float* v, int64_t n, int64_t D, const float* s,
                          int64_t stride) {
  for (int64_t r = 0; r < rows; r++) {
    memset(o[r], 0, (size_t)D * sizeof(float));
    for (int64_t c = 0; c < n; c++) EI_FN(axpy_f32)(o[r], s[r * stride + c], v + c * D, D);
  }
}

// attend_prefill is attend for a prefill step: the same item, over the
// gathered keys and values (ei_attention_prep). Scores run to the item's
// last token's keys rounded up to 16; each row's beyond its own last key
// are zeroed after the softmax, so they add nothing to its values.
static void EI_FN(attend_prefill)(const ei_attention_job* j, int64_t b, int64_t h, int64_t t0, int64_t t1, float* s,
                                  pscore_fn fast_score, pvalue_fn fast_value) {
  const int64_t G = j->G, D = j->D, ctx = j->cl[b];
  const int64_t rows = (t1 - t0) * G, stride = j->Lp;
  const float* q[EI_TOKEN_BLOCK * EI_MAX_GROUP];
  float* o[EI_TOKEN_BLOCK * EI_MAX_GROUP];
  item_rows(j, b, h, t0, t1, q, o);
  const int fast = D % 16 == 0 && fast_score != NULL;
  const size_t at = (size_t)((b * j->Hkv + h) * j->Lp * D);
  const int64_t n = (ctx + t1 + 15) / 16 * 16;
  (fast ? fast_score : EI_FN(pscore))(q, rows, j->kt + at, n, D, j->scale, s, stride);
  float inv[EI_TOKEN_BLOCK * EI_MAX_GROUP];
  for (int64_t r = 0; r < rows; r++) {
    float* sr = s + r * stride;
    const int64_t nr = ctx + t0 + r / G + 1;
    inv[r] = 1.0f / EI_FN(softmax_num)(sr, nr);
    for (int64_t c = nr; c < n; c++) sr[c] = 0;
  }
  (fast ? fast_value : EI_FN(pvalue))(o, rows, j->vt + at, n, D, s, stride);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t d = 0; d < D; d++) o[r][d] *= inv[r];
}

#undef EI_FN
#undef EI_CAT
#undef EI_CAT2
