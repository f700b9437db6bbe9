package quant

import (
	"fmt"
	"math"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// PerChannel is an int8 weight with one symmetric scale per output channel,
// laid out [K, N] as DynamicQuantizeMatMul's B.
type PerChannel struct {
	N, K   int
	B      []int8
	Scales []float32
}

// QuantizePerChannel quantises w, a row-major [n, k] matrix (one row per
// output channel), to int8 with scale max|row|/127; an all-zero row gets
// scale 1.
func QuantizePerChannel(w []float32, n, k int) (*PerChannel, error) {
	if n <= 0 || k <= 0 || len(w) != n*k {
		return nil, fmt.Errorf("%w: %d values for [%d, %d]", ErrShape, len(w), n, k)
	}
	q := &PerChannel{N: n, K: k, B: make([]int8, k*n), Scales: make([]float32, n)}
	for r := range n {
		row := w[r*k : (r+1)*k]
		var m float64
		for _, v := range row {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("%w: row %d holds %v", ErrShape, r, v)
			}
			m = max(m, math.Abs(float64(v)))
		}
		s := m / 127
		if s == 0 {
			s = 1
		}
		q.Scales[r] = float32(s)
		for c, v := range row {
			q.B[c*n+r] = int8(math.Round(float64(v) / s))
		}
	}
	return q, nil
}

// Dequantize returns the [n, k] matrix the codes stand for.
func (q *PerChannel) Dequantize() []float32 {
	w := make([]float32, q.N*q.K)
	for r := range q.N {
		for c := range q.K {
			w[r*q.K+c] = float32(q.B[c*q.N+r]) * q.Scales[r]
		}
	}
	return w
}

// Bytes is the size of B and the scales.
func (q *PerChannel) Bytes() int64 { return int64(len(q.B)) + 4*int64(len(q.Scales)) }

// emitPerChannel emits DynamicQuantizeMatMul(x, B, scales) under name.
func emitPerChannel(b *onnx.Builder, name, x string, q *PerChannel) string {
	b.Opset(onnx.DomainMicrosoft, 1)
	return b.MS("DynamicQuantizeMatMul", []string{x,
		b.Int8(name+".qweight_int8", []int64{int64(q.K), int64(q.N)}, q.B),
		b.Float32(name+".scales", []int64{int64(q.N)}, q.Scales),
	})
}
