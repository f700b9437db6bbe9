// edgeinfer's ONNX Runtime custom operators: the glue (ops.c) that binds
// the kernels to the loaded library, as customops.go calls it.
#ifndef EDGEINFER_OPS_H
#define EDGEINFER_OPS_H

#include <stddef.h>

#define EDGEINFER_OP_DOMAIN "ai.edgeinfer"

// edgeinfer_ops_init binds to the already loaded ONNX Runtime at path and
// builds the operator domain, the kernels' variants picked without the
// instruction sets in off (cpu.h) and the matrix kernel's prefetch hint
// prefetch (matmul_q4.h's EI_Q4_PREFETCH_*); 0 on success, else -1 with a
// message in err.
int edgeinfer_ops_init(const char* path, unsigned off, int prefetch, char* err, size_t errlen);
// edgeinfer_ops_register adds the domain to an OrtSessionOptions.
int edgeinfer_ops_register(void* session_options, char* err, size_t errlen);
// edgeinfer_ops_release frees the domain before the library is unloaded.
void edgeinfer_ops_release(void);
// ei_ops_shape_in_place (1 unless a benchmark turns it off): the kernels
// read their inputs' shapes in place where the runtime allows (ops.c's
// input).
extern int ei_ops_shape_in_place;
// ei_ops_set_timing (off unless a caller turns it on): while on, each
// operator's runs and the wall nanoseconds in its compute function, thread
// pool hand-outs included, are summed over every session of the process.
// ei_ops_time reads operator i's (i < ei_ops_count(); its name, NULL past
// the last), ei_ops_time_reset zeroes them all.
void ei_ops_set_timing(int on);
size_t ei_ops_count(void);
const char* ei_ops_time(size_t i, long long* ns, long long* runs);
void ei_ops_time_reset(void);
// ei_ops_product_threads reads, for MatMulNBits since timing was last
// turned on, the wall time of its products' hand-outs to the thread pool
// and the time the pool's threads spent inside them, summed over the
// threads.
void ei_ops_product_threads(long long* parallel_ns, long long* busy_ns);

#endif
