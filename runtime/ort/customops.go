package ort

// -Wno-unused-parameter only because cgo's generated wrappers of C functions
// without parameters trip it; TestKernelCompilesCleanly builds our C files
// with the full -Wall -Wextra -Werror.

/*
#cgo CFLAGS: -O3 -Wall -Wextra -Wno-unused-parameter
#cgo LDFLAGS: -lm
#cgo linux LDFLAGS: -ldl
#include <stdlib.h>
#include <string.h>
#include "cpu.h"
#include "matmul_q4.h"
#include "ops.h"
#include "paged_attention.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	onnx "github.com/yalue/onnxruntime_go"
)

// OpDomain is the operator domain of edgeinfer's own ONNX Runtime kernels,
// registered with every session (ops.c binds them). PagedAttention is
// attention over the paged KV cache read in place (paged_attention.c has
// its contract); the SDK's paged decoder graphs use it unless built for
// portability (pkg/onnx/llama Options.PortableAttention), in the fused
// form that splits and rotates the stacked q/k/v projection itself
// (RotaryQKV, rotary_qkv.c, is that step alone, for bundles built before
// graph revision 10). MatMulNBits is
// int4 and int8 block-32 MatMulNBits (matmul_q4.c), used by graphs built with
// pkg/onnx/llama by default (Options.PortableMatMul: not), with the RMSNorm
// in front of a projection folded in where the graph has one (norm.go there).
const OpDomain = C.EDGEINFER_OP_DOMAIN

// ErrCustomOps reports that edgeinfer's operators could not be bound to the
// loaded ONNX Runtime (a library older than 1.17): sessions still open, but
// graphs that use the OpDomain operators fail to load.
var ErrCustomOps = errors.New("ort: edgeinfer custom operators unavailable")

// initCustomOps binds the operators to the library just loaded from path.
// Called with env.mu held.
func initCustomOps(path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	hint, err := prefetchHint()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCustomOps, err)
	}
	if C.edgeinfer_ops_init(cpath, C.uint(kernelsOff()), hint, &msg[0], C.size_t(len(msg))) != 0 {
		return fmt.Errorf("%w: %s", ErrCustomOps, C.GoString(&msg[0]))
	}
	return nil
}

// prefetchEnv sets the matrix kernel's prefetch hint for a decode step's
// weights against the one chosen for the CPU at load (matmul_q4.c's
// ahead): "nta" non-temporal, "t0" into every cache level. Unset, the
// CPU's choice; either way the version matrix (Kernels) names it. It
// exists to measure the choice on a board: BenchmarkStepSplit in
// runtime/engine, run with each.
const prefetchEnv = "EDGEINFER_PREFETCH"

// prefetchHint is prefetchEnv as ei_q4_init takes it.
func prefetchHint() (C.int, error) {
	switch v := os.Getenv(prefetchEnv); v {
	case "":
		return C.EI_Q4_PREFETCH_CPU, nil
	case "t0":
		return C.EI_Q4_PREFETCH_T0, nil
	case "nta":
		return C.EI_Q4_PREFETCH_NTA, nil
	default:
		return 0, fmt.Errorf("ort: %s=%q: want nta or t0, or leave it unset for the CPU's own choice", prefetchEnv, v)
	}
}

// customOpsFor refuses, before ONNX Runtime sees it, a model that imports
// OpDomain when the operators could not be bound (env.opsErr): ONNX
// Runtime would only say it has no kernel for the node.
func customOpsFor(info ModelInfo) error {
	env.mu.Lock()
	why := env.opsErr
	env.mu.Unlock()
	if why == nil {
		return nil
	}
	for _, o := range info.Opsets {
		if o.Domain == OpDomain {
			// why says what to do about itself (an ONNX Runtime before
			// 1.17, a bad EDGEINFER_PREFETCH); a portable bundle needs
			// none of the operators whatever the cause
			return fmt.Errorf("the model uses operators of %s, which cannot run here (%w); "+
				"a bundle built with --portable-attention --portable-matmul runs without them", OpDomain, why)
		}
	}
	return nil
}

// releaseCustomOps frees the operator domain; called with env.mu held,
// before the library is unloaded.
func releaseCustomOps() {
	C.edgeinfer_ops_release()
	domainAdded.Store(false) // a library loaded again starts with an empty registry
}

// ONNX Runtime adds a custom operator domain to its process-wide schema
// registry when the first session that uses it is created, checking and
// adding without a lock: two sessions created at once can both find it
// missing, and the second fails ("Trying to add a domain to
// DomainToVersion map, but the domain is already exist", seen when two
// devices of one process loaded their first model together). So sessions
// are created one at a time until one has been created; after that they
// run in parallel (TestFirstSessionsAtOnce).
var (
	domainMu    sync.Mutex
	domainAdded atomic.Bool
)

// createFirstAlone calls create, alone while no session has been made.
func createFirstAlone(create createFunc, in, out []string, so *onnx.SessionOptions) (*onnx.DynamicAdvancedSession, error) {
	if domainAdded.Load() {
		return create(in, out, so)
	}
	domainMu.Lock()
	defer domainMu.Unlock()
	sess, err := create(in, out, so)
	if err == nil {
		domainAdded.Store(true)
	}
	return sess, err
}

// registerCustomOps adds the operator domain to so.
//
// onnxruntime_go offers no way to add a custom operator domain, so this
// reads the OrtSessionOptions pointer that is its SessionOptions' only
// field. go.mod pins that module's version; should its layout ever change,
// optionsLayoutOK refuses rather than pass ONNX Runtime a wrong pointer.
func registerCustomOps(so *onnx.SessionOptions) error {
	if !optionsLayoutOK() {
		return fmt.Errorf("%w: onnxruntime_go's SessionOptions is no longer one C pointer", ErrCustomOps)
	}
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(so))
	if ptr == nil {
		return fmt.Errorf("%w: session options not created", ErrCustomOps)
	}
	var msg [512]C.char
	if C.edgeinfer_ops_register(ptr, &msg[0], C.size_t(len(msg))) != 0 {
		return fmt.Errorf("%w: %s", ErrCustomOps, C.GoString(&msg[0]))
	}
	return nil
}

// optionsLayoutOK reports whether onnx.SessionOptions is still a struct of
// exactly one pointer field, the layout registerCustomOps relies on.
var optionsLayoutOK = sync.OnceValue(func() bool {
	t := reflect.TypeFor[onnx.SessionOptions]()
	return t.Kind() == reflect.Struct && t.NumField() == 1 &&
		t.Field(0).Type.Kind() == reflect.Pointer && t.Size() == unsafe.Sizeof(uintptr(0))
})

// The kernels' variants (instruction sets, see paged_attention.c) are picked
// when the operators are bound; tests switch between them to run each one
// the CPU supports against the others.

// The instruction sets the kernels leave out beside what the CPU lacks
// (cpu.h): kernelsOff (cpu_*.go) reads them from golang.org/x/sys/cpu,
// which takes GODEBUG=cpu.<name>=off into account.
const (
	cpuOffAVX2       = C.EI_CPU_AVX2
	cpuOffAVXVNNI    = C.EI_CPU_AVXVNNI
	cpuOffAVX512     = C.EI_CPU_AVX512
	cpuOffAVX512VNNI = C.EI_CPU_AVX512VNNI
	cpuOffDotProd    = C.EI_CPU_DOTPROD
)

// pickVariants picks the kernels' variants again as at load, without the
// instruction sets in off (cpuOff*), for tests: no session may be running.
func pickVariants(off uint) {
	hint, _ := prefetchHint() // checked when the library loaded
	C.ei_attention_init(C.uint(off))
	C.ei_q4_init(C.uint(off), hint)
}

// godebugCPU is the cpu.<name>=off settings of GODEBUG, for the version
// matrix (Kernels): a report measured with instruction sets switched off
// says so.
func godebugCPU() []string {
	var off []string
	for _, f := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if strings.HasPrefix(f, "cpu.") && strings.HasSuffix(f, "=off") {
			off = append(off, f)
		}
	}
	return off
}

// attentionVariants lists the attention kernel's variants this CPU runs,
// best last; valid once the library is acquired.
func attentionVariants() []string {
	return strings.Split(C.GoString(C.ei_attention_variants()), ",")
}

// attentionCompiled lists every attention variant built for this
// architecture, whether or not this CPU runs it.
func attentionCompiled() []string {
	return strings.Split(C.GoString(C.ei_attention_compiled()), ",")
}

// attentionVariant is the variant in use.
func attentionVariant() string { return C.GoString(C.ei_attention_current()) }

// useAttentionVariant switches every session's attention kernel to the
// named variant, for tests: no session may be running.
func useAttentionVariant(name string) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	if C.ei_attention_use(cname) != 0 {
		return fmt.Errorf("ort: attention variant %q is not one this CPU runs (%s)", name, strings.Join(attentionVariants(), ", "))
	}
	return nil
}

// setShapeInPlace turns the kernels' in-place read of their inputs'
// shapes (C API 24) on or off, for the benchmark that measures it: no
// session may be running.
func setShapeInPlace(on bool) {
	C.ei_ops_shape_in_place = 0
	if on {
		C.ei_ops_shape_in_place = 1
	}
}

// setAttentionPrefetch turns the attention items' prefetch of their next
// key and value blocks on or off, for the benchmark that measures it: no session
// may be running.
func setAttentionPrefetch(on bool) {
	C.ei_attention_prefetch_on = 0
	if on {
		C.ei_attention_prefetch_on = 1
	}
}

// setPrefillRows turns the 256-bit tiles' six rows in a prefill chunk
// (matmul_q4.c's prefill_rows) on or off, for the benchmark that measures
// them: no session may be running.
func setPrefillRows(on bool) {
	C.ei_q4_prefill_rows_on = 0
	if on {
		C.ei_q4_prefill_rows_on = 1
	}
}

// q4Variants, q4Compiled, q4Variant and useQ4Variant are the same for the
// int4/int8 matrix kernel (matmul_q4.c).
func q4Variants() []string { return strings.Split(C.GoString(C.ei_q4_variants()), ",") }
func q4Compiled() []string { return strings.Split(C.GoString(C.ei_q4_compiled()), ",") }
func q4Variant() string    { return C.GoString(C.ei_q4_current()) }

// q4Plan is how ei_q4_plan splits a product of M rows by N×K int4
// weights (float16 scales) for a pool of `threads` on the current variant:
// its batches, the regions, pieces and items a piece when split by
// regions, the items, the groups an item and the row tiles, for its test.
func q4Plan(M, N, K, threads int) (batches, regions, pieces, piece, items, chunk, rowTiles int) {
	j, free := newQ4Job()
	defer free()
	j.M, j.N, j.K, j.nb, j.bits, j.f16 = C.int64_t(M), C.int64_t(N), C.int64_t(K), C.int64_t((K+31)/32), 4, 1
	batches = int(C.ei_q4_plan(j, C.int(threads)))
	return batches, int(j.regions), int(j.pieces), int(j.piece), int(j.items), int(j.chunk), int(j.row_tiles)
}

// newQ4Job is a zeroed job in C memory, aligned as C lays it out (its
// claim words a cache line each, which Go's allocator would not align).
func newQ4Job() (*C.ei_q4_job, func()) {
	p := C.aligned_alloc(64, (C.sizeof_ei_q4_job+63)&^63)
	C.memset(p, 0, C.sizeof_ei_q4_job)
	return (*C.ei_q4_job)(p), func() { C.free(p) }
}

// q4Stolen runs the product y = a·Bᵀ (M rows, int4 or int8 codes b and
// scales as MatMulNBits takes them) split by regions for three threads,
// on this thread alone and in the worst order: region 2 first, whose
// runner then takes every piece of regions 0 and 1 from their backs (a
// run each), and the others after it, finding nothing left. It returns y
// and each row's largest output's index (the job's best), for its test;
// ok false when the product does not split by regions.
func q4Stolen(bits, M, N, K int, a []float32, b []uint8, scales []float32) (y []float32, best []int64, ok bool) {
	nb := (K + 31) / 32
	j, free := newQ4Job()
	defer free()
	j.M, j.N, j.K, j.nb, j.bits = C.int64_t(M), C.int64_t(N), C.int64_t(K), C.int64_t(nb), C.int(bits)
	j.f16 = C.ei_q4_f16_exact((*C.float)(&scales[0]), C.size_t(len(scales)))
	w := C.aligned_alloc(64, (C.ei_q4_packed_size(j.bits, j.f16, j.N, j.nb)+63)&^63) // ei_q4_pack's out is 64-byte aligned
	defer C.free(w)
	C.ei_q4_pack(j.bits, j.f16, 0, (*C.uint8_t)(&b[0]), (*C.float)(&scales[0]), j.N, j.nb, (*C.uint8_t)(w))
	ca := C.CBytes(unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), 4*len(a)))
	defer C.free(ca)
	cy := C.malloc(C.size_t(4 * M * N))
	defer C.free(cy)
	cbest := C.malloc(C.size_t(8 * M))
	defer C.free(cbest)
	act := C.malloc(C.ei_q4_scratch(j.M, j.nb))
	defer C.free(act)
	j.a, j.y, j.w, j.best = (*C.float)(ca), (*C.float)(cy), (*C.uint8_t)(w), (*C.int64_t)(cbest)
	C.ei_q4_bind(j, act)
	for i := range M {
		C.ei_q4_quantize(unsafe.Pointer(j), C.size_t(i))
	}
	if C.ei_q4_plan(j, 3) != 3 || j.regions != 3 {
		return nil, nil, false
	}
	scratch := C.malloc(C.ei_q4_best_scratch(j))
	defer C.free(scratch)
	C.ei_q4_best_bind(j, scratch)
	for b := 2; b >= 0; b-- {
		C.ei_q4_batch(unsafe.Pointer(j), C.size_t(b))
	}
	C.ei_q4_best(j)
	y = append([]float32(nil), unsafe.Slice((*float32)(cy), M*N)...)
	best = append([]int64(nil), unsafe.Slice((*int64)(cbest), M)...)
	return y, best, true
}

// Kernels names the variants edgeinfer's operators run on this CPU, for a
// report's version matrix: the int4/int8 matrix kernel's, the code its
// batch-1 product runs on and how that streams the weights (the prefetch
// distance and hint chosen for this CPU at load; a decode step's product split in
// one region a thread, the others' taken from the back by a thread done
// with its own, ei_q4_plan), and the paged attention kernel's.
func Kernels() string {
	k := fmt.Sprintf("matmul %s (batch 1: %s, %s, one region a thread), attention %s", q4Variant(), C.GoString(C.ei_q4_gemv_tile()), C.GoString(C.ei_q4_gemv()), attentionVariant())
	if off := godebugCPU(); len(off) > 0 {
		k += " (GODEBUG " + strings.Join(off, ",") + ")"
	}
	if v := os.Getenv(prefetchEnv); v != "" {
		k += " (" + prefetchEnv + "=" + v + ")"
	}
	return k
}

func useQ4Variant(name string) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	if C.ei_q4_use(cname) != 0 {
		return fmt.Errorf("ort: matmul variant %q is not one this CPU runs (%s)", name, strings.Join(q4Variants(), ", "))
	}
	return nil
}
