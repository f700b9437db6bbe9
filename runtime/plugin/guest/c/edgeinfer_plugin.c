/*
 * edgeinfer_plugin.c: the C guest kit (see edgeinfer_plugin.h). The wire
 * format is runtime/plugin/ABI.md; this file follows the same rules as the
 * Go codec in runtime/plugin/abi, which the host uses to check what comes
 * back.
 */
#include "edgeinfer_plugin.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT(name) __attribute__((export_name(name)))
#define IMPORT(mod, name) __attribute__((import_module(mod), import_name(name)))

IMPORT("edgeinfer_host", "call") int32_t ei__host_call(int32_t name_ptr, int32_t name_len, int32_t req_ptr, int32_t req_len);
IMPORT("edgeinfer_host", "take") int32_t ei__host_take(int32_t dst_ptr, int32_t dst_len);

/* The request buffer, reused across calls. */
static uint8_t *in_buf;
static size_t in_cap;

/* The response being built, reused across calls. */
static uint8_t *out_buf;
static size_t out_len, out_cap;
static uint32_t out_count;
static int failed;

/* Allocations freed when the next call starts. */
static void **scratch;
static size_t n_scratch, cap_scratch;

static uint32_t addr(const void *p) { return (uint32_t)(uintptr_t)p; }

static size_t pad8(size_t n) { return (8 - n % 8) % 8; }

static int reserve(size_t extra) {
    if (out_len + extra <= out_cap) return 0;
    size_t c = out_cap ? out_cap : 4096;
    while (c < out_len + extra) {
        if (c > SIZE_MAX / 2) return -1;
        c *= 2;
    }
    uint8_t *b = realloc(out_buf, c);
    if (!b) return -1;
    out_buf = b;
    out_cap = c;
    return 0;
}

static void put(const void *p, size_t n) {
    memcpy(out_buf + out_len, p, n);
    out_len += n;
}

static void put_u32(uint32_t v) { put(&v, 4); } /* wasm32 is little-endian */
static void put_u64(uint64_t v) { put(&v, 8); }

static void zeros(size_t n) {
    memset(out_buf + out_len, 0, n);
    out_len += n;
}

EXPORT("edgeinfer_abi_version") int32_t ei__abi_version(void) { return 1; }

EXPORT("edgeinfer_alloc") int32_t ei__alloc(int32_t size) {
    if (size < 0) return 0;
    if ((size_t)size > in_cap || !in_buf) {
        free(in_buf);
        in_cap = size > 8 ? (size_t)size : 8;
        in_buf = malloc(in_cap); /* 8-aligned or better (dlmalloc) */
        if (!in_buf) {
            in_cap = 0;
            return 0;
        }
    }
    return (int32_t)addr(in_buf);
}

void *ei_scratch(size_t size) {
    if (n_scratch == cap_scratch) {
        size_t c = cap_scratch ? 2 * cap_scratch : 16;
        void **s = realloc(scratch, c * sizeof *s);
        if (!s) return NULL;
        scratch = s;
        cap_scratch = c;
    }
    void *p = aligned_alloc(8, size ? (size + 7) & ~(size_t)7 : 8);
    if (p) scratch[n_scratch++] = p;
    return p;
}

static void free_scratch(void) {
    for (size_t i = 0; i < n_scratch; i++) free(scratch[i]);
    n_scratch = 0;
}

int ei_error(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof msg) n = sizeof msg - 1;
    failed = 1;
    out_len = 0;
    if (reserve(8 + (size_t)n) == 0) {
        put("EIER", 4);
        put_u32((uint32_t)n);
        put(msg, (size_t)n);
    }
    return -1;
}

int ei_output(const char *name, int dtype, int rank, const int64_t *dims, const void *data, uint64_t size) {
    if (failed) return -1;
    size_t nl = strlen(name);
    if (nl > 256 || rank < 0 || rank > EI_MAX_RANK || dtype < EI_F32 || dtype > EI_STR)
        return ei_error("ei_output %s: name over 256 bytes, rank %d or dtype %d out of range", name, rank, dtype);
    size_t head = 4 + nl + 4 + 8 * (size_t)rank + 8;
    if (size > SIZE_MAX / 2 || reserve(head + 16 + (size_t)size) != 0)
        return ei_error("ei_output %s: out of memory for %llu bytes", name, (unsigned long long)size);
    put_u32((uint32_t)nl);
    put(name, nl);
    uint8_t meta[4] = {(uint8_t)dtype, (uint8_t)rank, 0, 0};
    put(meta, 4);
    for (int i = 0; i < rank; i++) put_u64((uint64_t)dims[i]);
    put_u64(size);
    zeros(pad8(out_len));
    if (size) put(data, (size_t)size);
    zeros(pad8(out_len));
    out_count++;
    return 0;
}

static uint64_t dtype_size(uint8_t d) {
    switch (d) {
    case EI_F32: case EI_I32: return 4;
    case EI_I64: case EI_F64: return 8;
    case EI_U8: case EI_STR: return 1;
    }
    return 0;
}

/* decode parses a tensors message (the Go codec's rules) into t; it
 * returns the count, or -1 with the reason as the call's error. */
static int decode(const uint8_t *b, size_t len, ei_tensor *t, int max) {
    if (len < 8) return ei_error("kit: message of %zu bytes", len);
    uint32_t count;
    memcpy(&count, b + 4, 4);
    if (memcmp(b, "EIER", 4) == 0) {
        if ((size_t)count != len - 8) return ei_error("kit: malformed error message");
        return ei_error("%.*s", (int)count, (const char *)b + 8);
    }
    if (memcmp(b, "EIT1", 4) != 0) return ei_error("kit: not a tensors message");
    if (count > (uint32_t)max) return ei_error("kit: %u tensors, this kit takes %d", count, max);
    size_t off = 8;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t nl;
        if (len - off < 4) return ei_error("kit: tensor %u truncated", i);
        memcpy(&nl, b + off, 4);
        off += 4;
        if (nl > 256 || len - off < (size_t)nl + 4) return ei_error("kit: tensor %u name length %u", i, nl);
        t[i].name = (const char *)b + off;
        t[i].name_len = nl;
        off += nl;
        t[i].dtype = b[off];
        t[i].rank = b[off + 1];
        if (!dtype_size(t[i].dtype) || t[i].rank > EI_MAX_RANK || b[off + 2] || b[off + 3])
            return ei_error("kit: tensor %u dtype %u rank %u", i, t[i].dtype, t[i].rank);
        off += 4;
        if (len - off < 8 * (size_t)t[i].rank + 8) return ei_error("kit: tensor %u shape truncated", i);
        uint64_t want = dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].rank; d++) {
            memcpy(&t[i].dims[d], b + off, 8);
            off += 8;
            if (t[i].dims[d] < 0 || (t[i].dims[d] && want > (1ULL << 48) / (uint64_t)t[i].dims[d]))
                return ei_error("kit: tensor %u dimension %d", i, d);
            want *= (uint64_t)t[i].dims[d];
        }
        memcpy(&t[i].size, b + off, 8);
        off += 8;
        if (t[i].size != want) return ei_error("kit: tensor %u size %llu, shape needs %llu", i, (unsigned long long)t[i].size, (unsigned long long)want);
        off += pad8(off);
        if (off > len || len - off < t[i].size) return ei_error("kit: tensor %u data truncated", i);
        t[i].data = b + off;
        off += (size_t)t[i].size;
        off += pad8(off);
        if (off > len) off = len;
    }
    if (off != len) return ei_error("kit: %zu bytes after the last tensor", len - off);
    return (int)count;
}

const ei_tensor *ei_find(const ei_tensor *in, int n, const char *name) {
    size_t l = strlen(name);
    for (int i = 0; i < n; i++)
        if (in[i].name_len == l && memcmp(in[i].name, name, l) == 0) return &in[i];
    return NULL;
}

int64_t ei_elements(const ei_tensor *t) {
    int64_t e = 1;
    for (int i = 0; i < t->rank; i++) e *= t->dims[i];
    return e;
}

const char *ei_arg(const ei_tensor *in, int n, const char *key, const char *def) {
    char name[300];
    snprintf(name, sizeof name, "arg.%s", key);
    const ei_tensor *t = ei_find(in, n, name);
    if (!t || t->dtype != EI_STR) return def;
    char *s = ei_scratch((size_t)t->size + 1);
    if (!s) return def;
    memcpy(s, t->data, (size_t)t->size);
    s[t->size] = 0;
    return s;
}

int ei_host(const char *name, const ei_tensor *in, int n, ei_tensor *out, int max) {
    size_t need = 8;
    for (int i = 0; i < n; i++) need += 4 + in[i].name_len + 4 + 8 * (size_t)in[i].rank + 16;
    uint8_t *req = ei_scratch(need), *p = req;
    if (!req) return ei_error("kit: out of memory for a host request");
    memcpy(p, "EIR1", 4);
    uint32_t c = (uint32_t)n;
    memcpy(p + 4, &c, 4);
    p += 8;
    for (int i = 0; i < n; i++) {
        memcpy(p, &in[i].name_len, 4);
        memcpy(p + 4, in[i].name, in[i].name_len);
        p += 4 + in[i].name_len;
        p[0] = in[i].dtype, p[1] = in[i].rank, p[2] = p[3] = 0;
        p += 4;
        memcpy(p, in[i].dims, 8 * (size_t)in[i].rank);
        p += 8 * (size_t)in[i].rank;
        uint32_t a[2] = {in[i].size ? addr(in[i].data) : 0, 0};
        memcpy(p, a, 8);
        memcpy(p + 8, &in[i].size, 8);
        p += 16;
    }
    int32_t len = ei__host_call((int32_t)addr(name), (int32_t)strlen(name), (int32_t)addr(req), (int32_t)need);
    uint8_t *resp = ei_scratch((size_t)len);
    if (!resp) return ei_error("kit: out of memory for %d bytes of %s's response", len, name);
    if (ei__host_take((int32_t)addr(resp), len) != len) return ei_error("kit: take returned another length");
    return decode(resp, (size_t)len, out, max);
}

EXPORT("edgeinfer_run") int64_t ei__run(int32_t ptr, int32_t size) {
    static ei_tensor in[EI_MAX_TENSORS];
    free_scratch();
    failed = 0;
    out_count = 0;
    out_len = 0;
    if (reserve(8) == 0) {
        put("EIT1", 4);
        put_u32(0);
    }
    int n = -1;
    if (ptr != (int32_t)addr(in_buf) || size < 0 || (size_t)size > in_cap)
        ei_error("kit: request at %d, %d bytes, is not the buffer edgeinfer_alloc returned", ptr, size);
    else
        n = decode(in_buf, (size_t)size, in, EI_MAX_TENSORS);
    if (n >= 0 && !failed) ei_plugin_run(in, n);
    if (!failed) memcpy(out_buf + 4, &out_count, 4);
    return ((int64_t)addr(out_buf) << 32) | (uint32_t)out_len;
}
