package quant

import (
	"fmt"
	"github.com/edgeinfer/edgeinfer/pkg/f16"
	"math"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
)

// Emitter is a llama.WeightEmitter that quantises each projection as the
// decoder builder emits it, so a large model is quantised while it is built
// and never held as fp32 whole: int4/int8 weights become
// com.microsoft.MatMulNBits, fp16 weights a float16 initializer with a Cast.
// Embedding tables become com.microsoft.GatherBlockQuantized under int4/int8
// (fp16 under the fp16 scheme) unless kept.
//
// An Emitter is not safe for concurrent use; the builder calls it from one
// goroutine. Layers returns the table of what it did.
type Emitter struct {
	scheme Scheme
	// Keep lists name substrings ("lm_head", "embed_tokens") whose weights
	// stay fp32.
	Keep   []string
	layers []Layer
}

// NewEmitter returns an emitter for a scheme name (see ParseScheme) keeping
// the weights whose names contain one of keep.
func NewEmitter(scheme string, keep ...string) (*Emitter, error) {
	s, err := ParseScheme(scheme)
	if err != nil {
		return nil, err
	}
	return &Emitter{scheme: s, Keep: keep}, nil
}

// NewEmitterScheme is NewEmitter for a Scheme value.
func NewEmitterScheme(s Scheme, keep ...string) (*Emitter, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &Emitter{scheme: s, Keep: keep}, nil
}

var _ llama.WeightEmitter = (*Emitter)(nil)

// Scheme names the weight format for manifests, e.g. "int4-b32-acc4".
func (e *Emitter) Scheme() string { return e.scheme.String() }

// Layers returns the per-weight table so far.
func (e *Emitter) Layers() []Layer { return e.layers }

// Linear emits y = x·wᵀ (+ bias) for w [out, in] in the emitter's format.
func (e *Emitter) Linear(b *onnx.Builder, name, x string, w llama.Tensor, bias []float32) (string, error) {
	if len(w.Shape) != 2 || w.Shape[0]*w.Shape[1] != len(w.Data) {
		return "", fmt.Errorf("%w: %s.weight has shape %v, want 2-D", ErrShape, name, w.Shape)
	}
	n, k := w.Shape[0], w.Shape[1]
	before := int64(4 * len(w.Data))
	if keepMatch(name, e.Keep) {
		e.layers = append(e.layers, Layer{Name: name, Shape: []int{n, k}, Format: "fp32 (kept)", BytesBefore: before, BytesAfter: before})
		return llama.FP32Emitter{}.Linear(b, name, x, w, bias)
	}
	var y string
	switch e.scheme.Format {
	case FormatFP16:
		h := make([]uint16, len(w.Data))
		for r := 0; r < n; r++ { // [N, K] → [K, N], MatMul's layout
			for c := 0; c < k; c++ {
				h[c*n+r] = f16.FromFloat32(w.Data[r*k+c])
			}
		}
		wt := b.Float16(name+".weight_fp16", []int64{int64(k), int64(n)}, h)
		y = b.Op("MatMul", []string{x, b.Op("Cast", []string{wt}, onnx.AttrInt("to", int64(onnx.TensorProto_FLOAT)))})
		e.layers = append(e.layers, Layer{Name: name, Shape: []int{n, k}, Format: "fp16", BytesBefore: before,
			BytesAfter: int64(2 * len(h)), RelRMS: fp16Error(w.Data)})
	case FormatInt8PerChannel:
		q, err := QuantizePerChannel(w.Data, n, k)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		y = emitPerChannel(b, name, x, q)
		e.layers = append(e.layers, Layer{Name: name, Shape: []int{n, k}, Format: e.scheme.String(), BytesBefore: before,
			BytesAfter: q.Bytes(), RelRMS: RelativeRMS(w.Data, q.Dequantize())})
	default:
		if k%e.scheme.BlockSize != 0 && !e.scheme.PadK {
			return "", fmt.Errorf("%w: %s has K=%d, block %d", ErrBlockSize, name, k, e.scheme.BlockSize)
		}
		q, err := QuantizeBlockwise(w.Data, n, k, e.scheme.Bits(), e.scheme.BlockSize, e.scheme.Asymmetric)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		nb := int64(q.Blocks())
		in := []string{x,
			b.Uint8(name+".qweight", []int64{int64(n), nb, int64(q.BlockSize * q.Bits / 8)}, q.B),
			b.Float32(name+".scales", []int64{int64(n) * nb}, q.Scales),
		}
		if q.ZeroPoints != nil {
			in = append(in, b.Uint8(name+".zero_points", []int64{int64(len(q.ZeroPoints))}, q.ZeroPoints))
		}
		b.Opset(onnx.DomainMicrosoft, 1)
		y = b.MS("MatMulNBits", in, nbitsAttrs(q, e.scheme.AccuracyLevel)...)
		e.layers = append(e.layers, Layer{Name: name, Shape: []int{n, k}, Format: e.scheme.String(), BytesBefore: before,
			BytesAfter: q.Bytes(), RelRMS: RelativeRMS(w.Data, q.Dequantize())})
	}
	if bias != nil {
		if len(bias) != n {
			return "", fmt.Errorf("%w: %s.bias has %d values, want %d", ErrShape, name, len(bias), n)
		}
		y = b.Op("Add", []string{y, b.Float32(name+".bias", []int64{int64(n)}, bias)})
	}
	return y, b.Err()
}

// Embedding emits the row lookup: under int4/int8 (unless kept, or the
// hidden size is not a multiple of the block size) a
// com.microsoft.GatherBlockQuantized of a block-quantised table; else an
// fp32 Gather, or under fp16 a Gather of a
// float16 table followed by a Cast of the gathered rows (so the table stays
// half size in memory too).
func (e *Emitter) Embedding(b *onnx.Builder, name, ids string, table llama.Tensor) (string, error) {
	if embedQuantizable(e.scheme, table.Shape) && !keepMatch(name, e.Keep) && len(table.Data) == table.Shape[0]*table.Shape[1] {
		// int4/int8: GatherBlockQuantized (embed.go) keeps the table
		// quantised in memory and dequantises only the gathered rows.
		y, l, err := embedBuilder(b, e.scheme, name, ids, table.Data, table.Shape[0], table.Shape[1])
		if err != nil {
			return "", err
		}
		e.layers = append(e.layers, l)
		return y, nil
	}
	if e.scheme.Format != FormatFP16 || keepMatch(name, e.Keep) {
		sz := int64(4 * len(table.Data))
		e.layers = append(e.layers, Layer{Name: name, Shape: table.Shape, Format: "fp32 (kept)", BytesBefore: sz, BytesAfter: sz})
		return llama.FP32Emitter{}.Embedding(b, name, ids, table)
	}
	if len(table.Shape) != 2 {
		return "", fmt.Errorf("%w: %s.weight has shape %v, want 2-D", ErrShape, name, table.Shape)
	}
	h := f16.FromFloat32s(table.Data)
	t := b.Float16(name+".weight_fp16", []int64{int64(table.Shape[0]), int64(table.Shape[1])}, h)
	rows := b.Op("Gather", []string{t, ids}, onnx.AttrInt("axis", 0))
	e.layers = append(e.layers, Layer{Name: name, Shape: table.Shape, Format: "fp16", BytesBefore: int64(4 * len(h)),
		BytesAfter: int64(2 * len(h)), RelRMS: fp16Error(table.Data)})
	return b.Op("Cast", []string{rows}, onnx.AttrInt("to", int64(onnx.TensorProto_FLOAT))), b.Err()
}

// nbitsAttrs are MatMulNBits' attributes for q.
func nbitsAttrs(q *Blockwise, accuracy int) []*onnx.AttributeProto {
	attrs := []*onnx.AttributeProto{
		onnx.AttrInt("K", int64(q.K)), onnx.AttrInt("N", int64(q.N)),
		onnx.AttrInt("bits", int64(q.Bits)), onnx.AttrInt("block_size", int64(q.BlockSize)),
	}
	if accuracy > 0 {
		attrs = append(attrs, onnx.AttrInt("accuracy_level", int64(accuracy)))
	}
	return attrs
}

// fp16Error is the relative RMS error of w rounded to float16.
func fp16Error(w []float32) float64 {
	var num, den float64
	for _, v := range w {
		d := float64(f16.ToFloat32(f16.FromFloat32(v))) - float64(v)
		num += d * d
		den += float64(v) * float64(v)
	}
	if den == 0 {
		return 0
	}
	return math.Sqrt(num / den)
}
