package llama

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// WeightEmitter turns each weight-bearing operation into graph nodes. The
// builder calls it once per projection with the weight as read from the
// source, so a quantising emitter (int4 MatMulNBits, int8) sees fp32 data
// one tensor at a time and never needs an fp32 graph first.
//
// name is the Hugging Face weight name without ".weight", e.g.
// "model.layers.3.mlp.up_proj"; emitters should derive their initializer
// names from it. Implementations need not be safe for concurrent use: a
// build calls them from one goroutine.
type WeightEmitter interface {
	// Linear emits y = x·wᵀ + bias for x [..., in] and returns y's name.
	// w is [out, in]; bias is nil or [out].
	Linear(b *onnx.Builder, name, x string, w Tensor, bias []float32) (string, error)
	// Embedding emits a row lookup table[ids] for table [vocab, hidden] and
	// int64 ids of any shape, returning [ids..., hidden].
	Embedding(b *onnx.Builder, name, ids string, table Tensor) (string, error)
	// Scheme names the weight format for manifests: "fp32", "int4-b32", …
	Scheme() string
}

// FP32Emitter emits float32 MatMul against a transposed copy of each
// weight ([in, out], MatMul's layout) and a plain Gather for embeddings. The
// zero value is ready to use.
type FP32Emitter struct{}

// Scheme returns "fp32".
func (FP32Emitter) Scheme() string { return "fp32" }

// Linear emits MatMul(x, wᵀ) (+ Add bias).
func (FP32Emitter) Linear(b *onnx.Builder, name, x string, w Tensor, bias []float32) (string, error) {
	if len(w.Shape) != 2 {
		return "", fmt.Errorf("%w: %s.weight has shape %v, want 2-D", ErrTensorShape, name, w.Shape)
	}
	out, in := w.Shape[0], w.Shape[1]
	wt := transpose(w.Data, out, in)
	y := b.Op("MatMul", []string{x, b.Float32(name+".weight_t", []int64{int64(in), int64(out)}, wt)})
	if bias != nil {
		if len(bias) != out {
			return "", fmt.Errorf("%w: %s.bias has %d values, want %d", ErrTensorShape, name, len(bias), out)
		}
		y = b.Op("Add", []string{y, b.Float32(name+".bias", []int64{int64(out)}, bias)})
	}
	return y, b.Err()
}

// Embedding emits Gather(table, ids).
func (FP32Emitter) Embedding(b *onnx.Builder, name, ids string, table Tensor) (string, error) {
	if len(table.Shape) != 2 {
		return "", fmt.Errorf("%w: %s.weight has shape %v, want 2-D", ErrTensorShape, name, table.Shape)
	}
	t := b.Float32(name+".weight", []int64{int64(table.Shape[0]), int64(table.Shape[1])}, table.Data)
	return b.Op("Gather", []string{t, ids}, onnx.AttrInt("axis", 0)), b.Err()
}

// transpose returns the [cols, rows] transpose of a row-major [rows, cols]
// matrix, in cache-friendly tiles.
func transpose(src []float32, rows, cols int) []float32 {
	dst := make([]float32, len(src))
	const tile = 32
	for r0 := 0; r0 < rows; r0 += tile {
		r1 := min(r0+tile, rows)
		for c0 := 0; c0 < cols; c0 += tile {
			c1 := min(c0+tile, cols)
			for r := r0; r < r1; r++ {
				row := src[r*cols : r*cols+cols]
				for c := c0; c < c1; c++ {
					dst[c*rows+r] = row[c]
				}
			}
		}
	}
	return dst
}
