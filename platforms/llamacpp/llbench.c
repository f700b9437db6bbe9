// llbench.c - quantise + decode-speed benchmark against prebuilt llama.cpp shared libs
// (from the npm package @node-llama-cpp/linux-x64@3.22.1, llama.cpp commit 0ad4a86), the
// reference side of compare.sh. A developer tool: nothing in edgeinfer links it.
// No llama.h is shipped, so the few by-value param structs are treated as opaque byte
// blobs of the exact size the library writes (checked by dumping the defaults: llama_context_params
// = 160 bytes, llama_model_params = 80 bytes, llama_model_quantize_params = 64 bytes), and
// fields are poked at offsets verified against the defaults (and re-checked after context
// creation with llama_n_threads() etc.).
//
// usage:
//   llbench quantize <in.gguf> <out.gguf> <ftype> [pure]
//   llbench bench <model.gguf> <label> [reps=3] [ngen=128] [nprompt=128]
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>

typedef int32_t llama_token;
typedef int32_t llama_pos;
typedef int32_t llama_seq_id;

struct llama_model;
struct llama_context;
struct llama_vocab;
typedef void *llama_memory_t;

// Stable for a long time (llama.h): int32 n_tokens + 6 pointers.
typedef struct llama_batch {
    int32_t n_tokens;
    llama_token *token;
    float *embd;
    llama_pos *pos;
    int32_t *n_seq_id;
    llama_seq_id **seq_id;
    int8_t *logits;
} llama_batch;

// Opaque param blobs, 8-byte aligned, exact sizes for this build.
typedef struct { uint64_t w[160 / 8]; } ctx_params_t;   // llama_context_params
typedef struct { uint64_t w[80 / 8]; } model_params_t;  // llama_model_params
typedef struct { uint64_t w[64 / 8]; } quant_params_t;  // llama_model_quantize_params

// llama_context_params offsets (this build; read off llama_context_default_params())
#define CP_N_CTX 0
#define CP_N_BATCH 4
#define CP_N_UBATCH 8
#define CP_N_SEQ_MAX 12
#define CP_N_THREADS 28
#define CP_N_THREADS_BATCH 32
#define CP_FLASH_ATTN 52
// llama_model_quantize_params offsets
#define QP_NTHREAD 0
#define QP_FTYPE 4
#define QP_PURE 19

extern void ggml_backend_load_all_from_path(const char *dir);
typedef void (*log_cb_t)(int level, const char *text, void *ud);
extern void llama_log_set(log_cb_t cb, void *ud);
extern void ggml_log_set(log_cb_t cb, void *ud);
extern void llama_backend_init(void);
extern void llama_backend_free(void);
extern const char *llama_print_system_info(void);
extern ctx_params_t llama_context_default_params(void);
extern model_params_t llama_model_default_params(void);
extern quant_params_t llama_model_quantize_default_params(void);
extern uint32_t llama_model_quantize(const char *in, const char *out, const quant_params_t *p);
extern struct llama_model *llama_model_load_from_file(const char *path, model_params_t p);
extern void llama_model_free(struct llama_model *m);
extern struct llama_context *llama_init_from_model(struct llama_model *m, ctx_params_t p);
extern void llama_free(struct llama_context *c);
extern llama_memory_t llama_get_memory(const struct llama_context *c);
extern void llama_memory_clear(llama_memory_t mem, bool data);
extern int32_t llama_decode(struct llama_context *c, llama_batch b);
extern void llama_synchronize(struct llama_context *c);
extern float *llama_get_logits_ith(struct llama_context *c, int32_t i);
extern llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
extern void llama_batch_free(llama_batch b);
extern uint32_t llama_n_ctx(const struct llama_context *c);
extern uint32_t llama_n_ctx_seq(const struct llama_context *c);
extern uint32_t llama_n_batch(const struct llama_context *c);
extern uint32_t llama_n_ubatch(const struct llama_context *c);
extern uint32_t llama_n_seq_max(const struct llama_context *c);
extern int32_t llama_n_threads(struct llama_context *c);
extern int32_t llama_n_threads_batch(struct llama_context *c);
extern uint64_t llama_model_n_params(const struct llama_model *m);
extern uint64_t llama_model_size(const struct llama_model *m);
extern int32_t llama_model_desc(const struct llama_model *m, char *buf, size_t n);
extern const struct llama_vocab *llama_model_get_vocab(const struct llama_model *m);
extern int32_t llama_vocab_n_tokens(const struct llama_vocab *v);

#define PUT_U32(blob, off, v) do { uint32_t _v = (uint32_t)(v); memcpy((char *)(blob) + (off), &_v, 4); } while (0)
#define GET_U32(blob, off) ({ uint32_t _v; memcpy(&_v, (char *)(blob) + (off), 4); _v; })

// ---- contention check: CPU time used by *other* processes during a window ----
static double sys_busy_s(void) { // all-CPU busy seconds from /proc/stat
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[10] = {0};
    if (!f) return 0;
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8) v[0] = 0;
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    // user nice system idle iowait irq softirq steal  -> busy = all but idle/iowait
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz;
}
static double self_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *libdir(void) {
    const char *d = getenv("LLAMA_LIBDIR");
    if (!d) { fprintf(stderr, "set LLAMA_LIBDIR to the unpacked npm package bins/linux-x64 (compare.sh does)\n"); exit(2); }
    return d;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void batch_add(llama_batch *b, llama_token t, llama_pos pos, llama_seq_id s, bool logits) {
    int i = b->n_tokens;
    b->token[i] = t;
    b->pos[i] = pos;
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = s;
    b->logits[i] = logits;
    b->n_tokens++;
}

static void check_decode(struct llama_context *ctx, llama_batch b, const char *what) {
    int32_t r = llama_decode(ctx, b);
    if (r != 0) {
        fprintf(stderr, "llama_decode failed (%s): %d\n", what, r);
        exit(1);
    }
}

// One repetition: clear KV, decode n_seq prompts of nprompt tokens (untimed), then time
// ngen steps each decoding one token per sequence with logits on. Returns tokens/s.
static double run_once(struct llama_context *ctx, int n_vocab, int n_seq, int nprompt, int ngen,
                       double *t_prompt_out, double *foreign_out) {
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_batch b = llama_batch_init(n_seq * nprompt > n_seq ? n_seq * nprompt : n_seq, 0, 1);

    b.n_tokens = 0;
    for (int s = 0; s < n_seq; s++)
        for (int p = 0; p < nprompt; p++)
            batch_add(&b, 1 + rand() % (n_vocab - 1), p, s, p == nprompt - 1);
    double t0 = now_s();
    check_decode(ctx, b, "prompt");
    llama_synchronize(ctx);
    *t_prompt_out = now_s() - t0;

    double b0 = sys_busy_s(), c0 = self_cpu_s();
    t0 = now_s();
    for (int g = 0; g < ngen; g++) {
        b.n_tokens = 0;
        for (int s = 0; s < n_seq; s++)
            batch_add(&b, 1 + rand() % (n_vocab - 1), nprompt + g, s, true);
        check_decode(ctx, b, "gen");
        llama_synchronize(ctx);
        volatile float sink = llama_get_logits_ith(ctx, -1)[0];
        (void)sink;
    }
    double t = now_s() - t0;
    double ncpu = (double)sysconf(_SC_NPROCESSORS_ONLN);
    // fraction of total machine CPU capacity used by other processes during the timed window
    *foreign_out = ((sys_busy_s() - b0) - (self_cpu_s() - c0)) / (t * ncpu);
    llama_batch_free(b);
    return (double)n_seq * ngen / t;
}

static int do_bench(const char *path, const char *label, int reps, int ngen, int nprompt) {
    model_params_t mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "load failed: %s\n", path); return 1; }
    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    fprintf(stderr, "model %s: desc='%s' n_params=%llu size=%llu bytes n_vocab=%d\n", path, desc,
            (unsigned long long)llama_model_n_params(model), (unsigned long long)llama_model_size(model), n_vocab);

    const int nseqs[2] = {1, 8};
    for (int k = 0; k < 2; k++) {
        int n_seq = nseqs[k];
        ctx_params_t cp = llama_context_default_params();
        // sanity: defaults must match what we expect at those offsets
        if (GET_U32(&cp, CP_N_CTX) != 512 || GET_U32(&cp, CP_N_BATCH) != 2048 || GET_U32(&cp, CP_N_UBATCH) != 512 ||
            GET_U32(&cp, CP_N_SEQ_MAX) != 1 || GET_U32(&cp, CP_N_THREADS) != 4 || GET_U32(&cp, CP_N_THREADS_BATCH) != 4) {
            fprintf(stderr, "unexpected llama_context_params layout\n");
            return 1;
        }
        PUT_U32(&cp, CP_N_CTX, 4096);
        PUT_U32(&cp, CP_N_BATCH, 2048);
        PUT_U32(&cp, CP_N_UBATCH, 512);
        PUT_U32(&cp, CP_N_SEQ_MAX, n_seq);
        PUT_U32(&cp, CP_N_THREADS, 2);
        PUT_U32(&cp, CP_N_THREADS_BATCH, 2);
        const char *fa = getenv("LLBENCH_FA"); // -1 auto (default), 0 off, 1 on
        if (fa) PUT_U32(&cp, CP_FLASH_ATTN, atoi(fa));
        struct llama_context *ctx = llama_init_from_model(model, cp);
        if (!ctx) { fprintf(stderr, "context init failed\n"); return 1; }
        fprintf(stderr, "ctx: n_ctx=%u n_ctx_seq=%u n_batch=%u n_ubatch=%u n_seq_max=%u n_threads=%d n_threads_batch=%d\n",
                llama_n_ctx(ctx), llama_n_ctx_seq(ctx), llama_n_batch(ctx), llama_n_ubatch(ctx), llama_n_seq_max(ctx),
                llama_n_threads(ctx), llama_n_threads_batch(ctx));
        if (llama_n_threads(ctx) != 2 || llama_n_threads_batch(ctx) != 2 || (int)llama_n_seq_max(ctx) != n_seq) {
            fprintf(stderr, "context params did not take effect\n");
            return 1;
        }
        srand(42);
        double tp, fo, fomax = 0;
        run_once(ctx, n_vocab, n_seq, 16, 8, &tp, &fo); // warmup (like llama-bench)
        double *v = calloc(reps, sizeof(double));
        double *vp = calloc(reps, sizeof(double));
        for (int r = 0; r < reps; r++) {
            v[r] = run_once(ctx, n_vocab, n_seq, nprompt, ngen, &tp, &fo);
            vp[r] = (double)n_seq * nprompt / tp;
            if (fo > fomax) fomax = fo;
            fprintf(stderr, "  %s batch=%d rep %d: gen %.2f tok/s (prompt %.1f tok/s) foreign_cpu=%.0f%%\n", label, n_seq, r, v[r], vp[r], 100 * fo);
        }
        qsort(v, reps, sizeof(double), cmp_d);
        qsort(vp, reps, sizeof(double), cmp_d);
        printf("RESULT model=%s batch=%d gen_tok_s_median=%.2f min=%.2f max=%.2f prompt_tok_s_median=%.1f reps=%d ngen=%d nprompt=%d foreign_cpu_max=%.0f%%\n",
               label, n_seq, v[reps / 2], v[0], v[reps - 1], vp[reps / 2], reps, ngen, nprompt, 100 * fomax);
        fflush(stdout);
        free(v);
        free(vp);
        llama_free(ctx);
    }
    llama_model_free(model);
    return 0;
}

// ggml_log_level: 0 NONE, 1 DEBUG, 2 INFO, 3 WARN, 4 ERROR, 5 CONT
static int g_last_level = 2;
static void log_cb(int level, const char *text, void *ud) {
    (void)ud;
    if (level != 5) g_last_level = level;
    int eff = level == 5 ? g_last_level : level;
    if (eff == 1 && !getenv("LLBENCH_DEBUG")) return;
    fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s quantize in out ftype [pure] | bench model label [reps] [ngen] [nprompt]\n", argv[0]);
        return 2;
    }
    llama_log_set(log_cb, NULL);
    ggml_log_set(log_cb, NULL);
    ggml_backend_load_all_from_path(libdir());
    llama_backend_init();
    fprintf(stderr, "system_info: %s\n", llama_print_system_info());
    int rc = 0;
    if (!strcmp(argv[1], "quantize")) {
        if (argc < 5) return 2;
        quant_params_t qp = llama_model_quantize_default_params();
        if (GET_U32(&qp, QP_FTYPE) != 7) { fprintf(stderr, "unexpected quantize params layout\n"); return 1; }
        PUT_U32(&qp, QP_NTHREAD, 2);
        PUT_U32(&qp, QP_FTYPE, atoi(argv[4]));
        if (argc > 5 && !strcmp(argv[5], "pure")) ((char *)&qp)[QP_PURE] = 1;
        rc = (int)llama_model_quantize(argv[2], argv[3], &qp);
        fprintf(stderr, "llama_model_quantize -> %d\n", rc);
    } else if (!strcmp(argv[1], "bench")) {
        int reps = argc > 4 ? atoi(argv[4]) : 3;
        int ngen = argc > 5 ? atoi(argv[5]) : 128;
        int nprompt = argc > 6 ? atoi(argv[6]) : 128;
        rc = do_bench(argv[2], argv[3], reps, ngen, nprompt);
    } else {
        return 2;
    }
    llama_backend_free();
    return rc;
}
