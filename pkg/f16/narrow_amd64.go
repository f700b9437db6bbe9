package f16

import "golang.org/x/sys/cpu"

// useF16C picks Narrow's vector path: F16C's VCVTPS2PH rounds eight values
// to nearest, ties to even, in one instruction, where the Go loop spends a
// branch and a few integer operations on each (BenchmarkNarrow; a float16
// KV cache narrows every decode step's keys and values, kvcache's
// BenchmarkScatter).
var useF16C = cpu.X86.HasAVX && cpu.X86.HasF16C

// narrowF16C converts src (len a multiple of 8) into dst eight values at a
// time and stops before the first eight that hold a NaN, whose bits F16C
// keeps (payload and all) where FromFloat32 returns one quiet NaN: it
// returns how many it converted.
//
//go:noescape
func narrowF16C(dst []uint16, src []float32) int

func narrow(dst []uint16, src []float32) {
	for useF16C && len(src) >= 8 {
		n := narrowF16C(dst, src[:len(src)&^7])
		dst, src = dst[n:], src[n:]
		if len(src) < 8 {
			break
		}
		narrowGeneric(dst[:8], src[:8]) // the eight with a NaN
		dst, src = dst[8:], src[8:]
	}
	narrowGeneric(dst, src)
}
