/*
 * edgeinfer_plugin.h: the guest kit for plugins written in C (the edgeinfer
 * plugin ABI, version 1, runtime/plugin/ABI.md). It implements the exports
 * (edgeinfer_abi_version, edgeinfer_alloc, edgeinfer_run), the tensor
 * codec and the host primitives' import, so that a plugin is one function:
 *
 *     #include "edgeinfer_plugin.h"
 *
 *     int ei_plugin_run(const ei_tensor *in, int n) {
 *         const ei_tensor *x = ei_find(in, n, "x");
 *         if (!x || x->dtype != EI_F32) return ei_error("no input x (float32)");
 *         ...
 *         return ei_output("y", EI_F32, 1, (int64_t[]){k}, y, k * 4);
 *     }
 *
 * built with Debian's clang, lld and wasi-libc:
 *
 *     clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor \
 *         -I runtime/plugin/guest/c -o p.wasm \
 *         runtime/plugin/guest/c/edgeinfer_plugin.c p.c -lm
 *
 * Input tensors alias the request buffer and are valid during the call.
 * Outputs are copied into the response as they are added. A call that
 * reports an error (ei_error) returns that error, whatever it added. No
 * allocation made through the kit outlives a call.
 */
#ifndef EDGEINFER_PLUGIN_H
#define EDGEINFER_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

enum ei_dtype { EI_F32 = 1, EI_I64 = 2, EI_I32 = 3, EI_U8 = 4, EI_F64 = 5, EI_STR = 6 };

#define EI_MAX_RANK 8
#define EI_MAX_TENSORS 64

typedef struct {
    const char *name; /* not NUL-terminated: name_len bytes */
    uint32_t name_len;
    uint8_t dtype;
    uint8_t rank;
    int64_t dims[EI_MAX_RANK];
    const void *data; /* 8-byte aligned in a request */
    uint64_t size;    /* bytes */
} ei_tensor;

/* The plugin implements this: handle one request of n tensors; add
 * outputs with ei_output and return 0, or return ei_error(...). */
int ei_plugin_run(const ei_tensor *in, int n);

/* ei_find returns the tensor called name, or NULL. */
const ei_tensor *ei_find(const ei_tensor *in, int n, const char *name);

/* ei_elements is the product of t's dimensions. */
int64_t ei_elements(const ei_tensor *t);

/* ei_arg returns the string argument key (tensor "arg.<key>") as a
 * NUL-terminated copy valid during the call, or def. */
const char *ei_arg(const ei_tensor *in, int n, const char *key, const char *def);

/* ei_output adds an output tensor (data copied); it returns 0, or -1 when
 * memory ran out (then the call's response is that error). */
int ei_output(const char *name, int dtype, int rank, const int64_t *dims, const void *data, uint64_t size);

/* ei_error makes the call's response an error message (printf format);
 * it returns -1, for `return ei_error(...)`. */
int ei_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ei_host runs the host primitive name (runtime/plugin/primitive) on the
 * n tensors of in, passed by reference (no copy), and decodes its outputs
 * into out (at most max). It returns the number of outputs, or -1 with
 * the primitive's refusal as the call's error. Outputs are valid during
 * the call. */
int ei_host(const char *name, const ei_tensor *in, int n, ei_tensor *out, int max);

/* ei_scratch returns size bytes, 8-aligned, freed when the call ends. */
void *ei_scratch(size_t size);

#endif
