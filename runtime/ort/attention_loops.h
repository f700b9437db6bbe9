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

static inline float EI_FN(dot_i8)(const float* restrict a, const int8_t* restrict b, int64_t n) {
  float acc[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) acc[l] += a[i + l] * (float)b[i + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; i++) s += a[i] * (float)b[i];
  return s;
}

static inline void EI_FN(axpy_f32)(float* restrict y, float w, const float* restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += w * x[i];
}

static inline void EI_FN(axpy_i8)(float* restrict y, float w, const int8_t* restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += w * (float)x[i];
}

// exp for x ≤ 0 (scores minus their maximum): Cephes' expf polynomial with
// the exponent put in by bit arithmetic, branch-free so a row vectorises.
// Relative error ~2e-7; inputs below -87 give 0.
static inline float EI_FN(exp_neg)(float x) {
  x = x < -87.0f ? -87.0f : x;
  float fx = floorf(x * 1.44269504088896341f + 0.5f);
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

// The two inner loops as functions of a run of keys (score_fn, value_fn in
// paged_attention.c): float keys and values, and the int8 pools' (converted
// as they are read, the block's scale folded into scale and w).
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

static void EI_FN(score_i8)(const float* const* q, int64_t rows, const void* k, int64_t step, int64_t n, int64_t D,
                            float scale, float* s, int64_t stride, int64_t col0) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t r = 0; r < rows; r++)
      s[r * stride + col0 + i] = scale * EI_FN(dot_i8)(q[r], (const int8_t*)k + i * step, D);
}

static void EI_FN(value_i8)(float* const* o, int64_t rows, const void* v, int64_t step, int64_t n, int64_t D,
                            float w, const float* s, int64_t stride, int64_t col0) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t r = 0; r < rows; r++)
      EI_FN(axpy_i8)(o[r], w * s[r * stride + col0 + i], (const int8_t*)v + i * step, D);
}

// attend computes one work item: row b, KV head h, tokens [t0, t1), i.e.
// the G query heads of h for each of those tokens. s holds one score row
// of max_keys floats per query row. fast_score and fast_value, where not
// NULL, replace the float loops for head sizes that are a multiple of 16.
static void EI_FN(attend)(const ei_attention_job* j, int64_t b, int64_t h, int64_t t0, int64_t t1, float* s,
                          score_fn fast_score, value_fn fast_value) {
  const int64_t G = j->G, D = j->D, bs = j->bs, ctx = j->cl[b];
  const int64_t rows = (t1 - t0) * G, stride = j->max_keys;
  const float* q[EI_TOKEN_BLOCK * EI_MAX_GROUP];
  float* o[EI_TOKEN_BLOCK * EI_MAX_GROUP];
  for (int64_t t = t0; t < t1; t++)
    for (int64_t g = 0; g < G; g++) {
      int64_t r = (t - t0) * G + g, off = ((b * j->T + t) * j->Hq + h * G + g) * D;
      q[r] = j->q + off;
      o[r] = j->out + off;
    }

  int fast = D % 16 == 0 && fast_score != NULL;
  score_fn score = fast ? fast_score : EI_FN(score_f32);
  value_fn value = fast ? fast_value : EI_FN(value_f32);
  score_fn pool_score = j->int8 ? EI_FN(score_i8) : score;
  value_fn pool_value = j->int8 ? EI_FN(value_i8) : value;
  const size_t elem = j->int8 ? 1 : sizeof(float);
  const int64_t* table = j->bt + b * j->M;

  // Scores against the cached slots, block by block through the table,
  // then against this step's keys: token t sees t' ≤ t, so the keys before
  // the item's first token are one run for every row (Hkv·D floats apart
  // in key), and new key tk ≥ t0 is scored by the rows of tokens tk.. — a
  // suffix of the rows. (One key at a time throughout, a 256-token prefill
  // chunk spent twice as long in attention: TestProfileDecodeAndPrefill.)
  for (int64_t m = 0; m * bs < ctx; m++) {
    int64_t blk = h * j->N + table[m], n = ctx - m * bs < bs ? ctx - m * bs : bs;
    pool_score(q, rows, (const char*)j->kc + blk * bs * D * elem, D, n, D,
               j->int8 ? j->scale * j->ks[blk] : j->scale, s, stride, m * bs);
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
    float* sr = s + r * stride;
    int64_t n = ctx + t0 + r / G + 1;
    float mx = sr[0];
    for (int64_t c = 1; c < n; c++) mx = sr[c] > mx ? sr[c] : mx;
    float sum = 0;
    for (int64_t c = 0; c < n; c++) {
      sr[c] = EI_FN(exp_neg)(sr[c] - mx);
      sum += sr[c];
    }
    inv[r] = 1.0f / sum;
    memset(o[r], 0, (size_t)D * sizeof(float));
  }

  // Weighted values: cached slots, then this step's.
  for (int64_t m = 0; m * bs < ctx; m++) {
    int64_t blk = h * j->N + table[m], n = ctx - m * bs < bs ? ctx - m * bs : bs;
    pool_value(o, rows, (const char*)j->vc + blk * bs * D * elem, D, n, D, j->int8 ? j->vs[blk] : 1.0f, s, stride,
               m * bs);
  }
  if (t0 > 0) value(o, rows, values, kstep, t0, D, 1.0f, s, stride, ctx);
  for (int64_t tk = t0; tk < t1; tk++) {
    int64_t first = (tk - t0) * G;
    value(o + first, rows - first, values + tk * kstep, 0, 1, D, 1.0f, s + first * stride, stride, ctx + tk);
  }
  for (int64_t r = 0; r < rows; r++)
    for (int64_t d = 0; d < D; d++) o[r][d] *= inv[r];
}

#undef EI_FN
#undef EI_CAT
#undef EI_CAT2
