package ort

// #include "ops.h"
import "C"

import "time"

// KernelTime is one of edgeinfer's operators (domain ai.edgeinfer) as the
// process ran it while SetKernelTiming was on: how many times a node of it
// ran, in every session, and the wall time its compute function took,
// its hand-outs to the session's thread pool included.
type KernelTime struct {
	Op   string
	Runs int64
	Time time.Duration
}

// SetKernelTiming starts (on, from zero) or stops the count KernelTimes
// reads. Where a step's time goes, per operator, without ONNX Runtime's
// profiler, whose per-node events lengthen a 110m decode step by about
// half (quant's TestProfileDecodeAndPrefill prints a step with and
// without it): a step's time less its kernels' is ONNX Runtime's executor
// between them and the caller's own work. Off, it costs a node one load
// and one call.
func SetKernelTiming(on bool) {
	if !on {
		C.ei_ops_set_timing(0)
		return
	}
	C.ei_ops_time_reset()
	C.ei_ops_set_timing(1)
}

// KernelTimes is every operator's count since SetKernelTiming(true), in
// the domain's order (PagedAttention, MatMulNBits, GatherBlockQuantized,
// RotaryQKV); operators that did not run have zero Runs.
func KernelTimes() []KernelTime {
	var out []KernelTime
	for i := range C.ei_ops_count() {
		var ns, runs C.longlong
		name := C.ei_ops_time(i, &ns, &runs)
		out = append(out, KernelTime{Op: C.GoString(name), Runs: int64(runs), Time: time.Duration(ns)})
	}
	return out
}

// ProductThreads is, for MatMulNBits since SetKernelTiming(true), the wall
// time of its products' hand-outs to the session's thread pool and the
// time the pool's threads spent inside them, summed over the threads:
// busy ÷ (parallel · threads) is the share of a product's parallel part
// the threads worked rather than waited for each other (runtime/engine's
// BenchmarkStepSplit logs it). Zero while timing is off.
func ProductThreads() (parallel, busy time.Duration) {
	var p, b C.longlong
	C.ei_ops_product_threads(&p, &b)
	return time.Duration(p), time.Duration(b)
}
