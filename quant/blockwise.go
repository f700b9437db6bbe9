package quant

import (
	"fmt"
	"math"

	"github.com/edgeinfer/edgeinfer/pkg/f16"
)

// Blockwise is one weight quantised for com.microsoft.MatMulNBits (the
// layout the package documentation records as verified on the CPU EP of
// ONNX Runtime 1.30):
//
//	B            uint8 [N, ceil(K/bs), bs·bits/8]  int4: low nibble = even element
//	scales       float32 [N, ceil(K/bs)]
//	zero_points  uint8 int4: [N, ceil(ceil(K/bs)/2)] packed, low nibble = even
//	             block; int8: [N, ceil(K/bs)]; nil when symmetric (the
//	             kernel's default zero point is 2^(bits-1))
//
// A last partial block is padded with zeros, which contribute nothing to the
// product, so any K works.
type Blockwise struct {
	N, K, BlockSize, Bits int
	B                     []uint8
	Scales                []float32
	ZeroPoints            []uint8
}

// Blocks is ceil(K / BlockSize).
func (q *Blockwise) Blocks() int { return (q.K + q.BlockSize - 1) / q.BlockSize }

// Bytes is the size of B, scales and zero points.
func (q *Blockwise) Bytes() int64 {
	return int64(len(q.B)) + 4*int64(len(q.Scales)) + int64(len(q.ZeroPoints))
}

// QuantizeBlockwise quantises w, a row-major [n, k] matrix (MatMulNBits'
// [N, K]: one row per output feature), with bits 4 or 8 and blocks of bs
// along K. Symmetric blocks map the value of largest magnitude to the most
// negative code (llama.cpp Q4_0's rule, all 2^bits codes used); asymmetric
// blocks span [min(0,min), max(0,max)] with a zero point.
func QuantizeBlockwise(w []float32, n, k, bits, bs int, asymmetric bool) (*Blockwise, error) {
	if n <= 0 || k <= 0 || len(w) != n*k {
		return nil, fmt.Errorf("%w: %d values for [%d, %d]", ErrShape, len(w), n, k)
	}
	if bits != 4 && bits != 8 {
		return nil, fmt.Errorf("%w: %d bits (want 4 or 8)", ErrScheme, bits)
	}
	if bs < 16 || bs&(bs-1) != 0 {
		return nil, fmt.Errorf("%w: block size %d (want a power of two ≥ 16)", ErrScheme, bs)
	}
	q := &Blockwise{N: n, K: k, BlockSize: bs, Bits: bits}
	nb := q.Blocks()
	blob := bs * bits / 8
	q.B = make([]uint8, n*nb*blob)
	q.Scales = make([]float32, n*nb)
	levels := 1<<bits - 1  // 15 or 255
	mid := 1 << (bits - 1) // 8 or 128
	var zpRow int
	if asymmetric {
		zpRow = nb
		if bits == 4 {
			zpRow = (nb + 1) / 2
		}
		q.ZeroPoints = make([]uint8, n*zpRow)
	}
	codes := make([]uint8, bs)
	for r := 0; r < n; r++ {
		row := w[r*k : r*k+k]
		for blk := 0; blk < nb; blk++ {
			vals := row[blk*bs : min(blk*bs+bs, k)]
			var scale float32
			zp := mid
			if asymmetric {
				lo, hi := float32(0), float32(0)
				for _, v := range vals {
					lo, hi = min(lo, v), max(hi, v)
				}
				scale = (hi - lo) / float32(levels)
				if scale != 0 {
					zp = int(math.Round(float64(-lo / scale)))
					zp = min(max(zp, 0), levels)
				}
			} else {
				var big float32
				for _, v := range vals {
					if abs32(v) > abs32(big) {
						big = v
					}
				}
				scale = f16Scale(big / -float32(mid))
			}
			inv := float32(0)
			if scale != 0 {
				inv = 1 / scale
			}
			clear(codes)
			for i, v := range vals {
				c := int(math.Round(float64(v*inv))) + zp
				codes[i] = uint8(min(max(c, 0), levels))
			}
			for i := len(vals); i < bs; i++ {
				codes[i] = uint8(zp) // padding dequantises to exactly 0
			}
			dst := q.B[(r*nb+blk)*blob : (r*nb+blk+1)*blob]
			if bits == 8 {
				copy(dst, codes)
			} else {
				for i := range dst {
					dst[i] = codes[2*i] | codes[2*i+1]<<4
				}
			}
			q.Scales[r*nb+blk] = scale
			if asymmetric {
				if bits == 8 {
					q.ZeroPoints[r*zpRow+blk] = uint8(zp)
				} else {
					q.ZeroPoints[r*zpRow+blk/2] |= uint8(zp) << (4 * (blk % 2))
				}
			}
		}
	}
	return q, nil
}

// Dequantize returns the [N, K] matrix the quantised weight stands for.
func (q *Blockwise) Dequantize() []float32 {
	nb := q.Blocks()
	blob := q.BlockSize * q.Bits / 8
	zpRow := nb
	if q.Bits == 4 {
		zpRow = (nb + 1) / 2
	}
	out := make([]float32, q.N*q.K)
	for r := 0; r < q.N; r++ {
		for blk := 0; blk < nb; blk++ {
			zp := 1 << (q.Bits - 1)
			if q.ZeroPoints != nil {
				if q.Bits == 8 {
					zp = int(q.ZeroPoints[r*zpRow+blk])
				} else {
					zp = int(q.ZeroPoints[r*zpRow+blk/2]>>(4*(blk%2))) & 0xf
				}
			}
			s := q.Scales[r*nb+blk]
			src := q.B[(r*nb+blk)*blob:]
			for i := 0; i < q.BlockSize && blk*q.BlockSize+i < q.K; i++ {
				var c int
				if q.Bits == 4 {
					c = int(src[i/2]>>(4*(i%2))) & 0xf
				} else {
					c = int(src[i])
				}
				out[r*q.K+blk*q.BlockSize+i] = float32(c-zp) * s
			}
		}
	}
	return out
}

// RelativeRMS is ‖approx − ref‖₂ / ‖ref‖₂ (0 for an all-zero reference that
// approx matches).
func RelativeRMS(ref, approx []float32) float64 {
	var num, den float64
	for i, r := range ref {
		d := float64(approx[i]) - float64(r)
		num += d * d
		den += float64(r) * float64(r)
	}
	if den == 0 {
		if num == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// f16Scale is s rounded to float16 where that is a normal float16: GGUF's
// Q4_0 and Q8_0 keep their block scales so, and ai.edgeinfer.MatMulNBits
// (runtime/ort matmul_q4.c) packs a node's scales as float16 when every one
// is exactly one, so a decode step streams 18 bytes per 32 int4 weights
// instead of 20. The codes are then rounded against the rounded scale, so
// the blocks stay exact for both operators. Scales too small for a normal
// float16 (≈6e-5, blocks whose largest weight is ~5e-4) keep float32, and
// their node the float32 layout.
func f16Scale(s float32) float32 {
	h := f16.ToFloat32(f16.FromFloat32(s))
	if a := abs32(h); a >= 0x1p-14 && a <= 65504 {
		return h
	}
	return s
}
