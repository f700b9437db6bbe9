// Package f16 converts between float32 and the two 16-bit float formats
// that models store weights and activations in: IEEE 754 binary16
// ("float16", "half") and bfloat16. It is the SDK's one codec: safetensors
// reads and writes checkpoints with it, quant emits fp16 weights with it,
// and runtime/ort's Float16Bits and BFloat16Bits tensor elements convert
// through it.
//
// Narrowing rounds to nearest, ties to even (what NumPy, PyTorch and ONNX
// Runtime's casts do); values beyond the range become ±Inf and NaN stays a
// NaN. Widening is exact: every 16-bit value is a float32. The functions
// are pure and safe for concurrent use.
package f16

import "math"

// FromFloat32 returns the binary16 bits nearest to f.
func FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 // a quiet NaN
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // below half the smallest subnormal: rounds to zero
		}
		// Subnormal result in units of 2^-24: (1.man) × 2^(e-14).
		man |= 0x800000
		shift := uint32(14 - e)
		h := man >> shift
		rem, mid := man&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > mid || (rem == mid && h&1 == 1) {
			h++ // a carry into bit 10 yields the smallest normal, as it should
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	if rem := man & 0x1fff; rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry out of the mantissa bumps the exponent, up to Inf
	}
	return sign | uint16(h)
}

// ToFloat32 returns the value of binary16 bits h (exactly).
func ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch exp {
	case 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: shift the mantissa up until its leading one becomes
		// the implicit bit, lowering the exponent to match.
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// FromFloat32s converts a slice to binary16 bits.
func FromFloat32s(src []float32) []uint16 {
	out := make([]uint16, len(src))
	Narrow(out, src)
	return out
}

// Narrow sets dst[i] to FromFloat32(src[i]) for each element of src (dst
// must be at least as long), allocating nothing: the loop for a stream of
// values, such as a float16 KV cache's keys on their way in. Magnitudes in
// [2^-14, 2^15), where such streams lie, are rounded in line; FromFloat32
// takes the rest (subnormals, the top binade, overflow, Inf, NaN). A call of
// FromFloat32 per element, which the compiler does not inline, takes about
// twice as long (BenchmarkNarrow, "each" against "narrow"). On amd64 with
// F16C the conversion is the CPU's (narrow_amd64.go), with the same bits.
func Narrow(dst []uint16, src []float32) {
	narrow(dst[:len(src)], src)
}

// narrowGeneric is Narrow in Go, for every CPU.
func narrowGeneric(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, x := range src {
		b := math.Float32bits(x)
		if e := b >> 23 & 0xff; e-113 < 29 { // |x| in [2^-14, 2^15)
			r := b + 0xfff + b>>13&1 // to nearest, ties to even; a carry moves into the exponent
			dst[i] = uint16(b>>16)&0x8000 | uint16((r&0x7fffffff)>>13-112<<10)
			continue
		}
		dst[i] = FromFloat32(x)
	}
}

// BFloat16FromFloat32 returns the bfloat16 bits nearest to f.
func BFloat16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // keep it a (quiet) NaN
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// BFloat16ToFloat32 returns the value of bfloat16 bits h (exactly).
func BFloat16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}
