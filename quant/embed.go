package quant

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"google.golang.org/protobuf/proto"
)

// Embedding tables dominate a small decoder's bytes once its projections are
// int4 (synthetic-110m: 98 MB of its 161 MB). com.microsoft.GatherBlockQuantized
// (verified on the CPU EP of ONNX Runtime 1.30, embed_test.go) gathers rows of
// a block-quantised table and dequantises only those rows, so the table stays
// int4/int8 in memory too. Its layout is MatMulNBits' with the table's rows as
// N and the hidden size as K:
//
//	data    uint8 [vocab, hidden·bits/8]  int4: low nibble = even column
//	scales  float32 [vocab, hidden/block_size]
//	attrs   bits, block_size, gather_axis 0, quantize_axis 1
//
// Symmetric blocks only: the kernel's default zero point (8 for int4, 128
// for int8) is the one QuantizeBlockwise's symmetric codes assume.

// embedQuantizable reports whether a [vocab, hidden] table can be stored
// for GatherBlockQuantized under s: int4/int8 and whole blocks (the op's
// data shape has no room for a padded tail).
func embedQuantizable(s Scheme, shape []int) bool {
	return (s.Format == FormatInt4 || s.Format == FormatInt8 || s.Format == FormatInt8PerChannel) && len(shape) == 2 &&
		shape[0] > 0 && shape[1] > 0 && shape[1]%s.BlockSize == 0
}

// quantizedEmbedding is one table ready for GatherBlockQuantized.
type quantizedEmbedding struct {
	q      *Blockwise
	data   []int64 // data dims
	scales []int64 // scales dims
	relRMS float64
}

// quantizeEmbedding quantises a row-major [vocab, hidden] table symmetrically
// in blocks of s.BlockSize along hidden.
func quantizeEmbedding(s Scheme, table []float32, vocab, hidden int) (*quantizedEmbedding, error) {
	if !embedQuantizable(s, []int{vocab, hidden}) {
		return nil, fmt.Errorf("%w: embedding [%d, %d] under %s (hidden must be a multiple of the block size)", ErrShape, vocab, hidden, s)
	}
	q, err := QuantizeBlockwise(table, vocab, hidden, s.Bits(), s.BlockSize, false)
	if err != nil {
		return nil, err
	}
	return &quantizedEmbedding{
		q:      q,
		data:   []int64{int64(vocab), int64(hidden * q.Bits / 8)},
		scales: []int64{int64(vocab), int64(q.Blocks())},
		relRMS: RelativeRMS(table, q.Dequantize()),
	}, nil
}

// attrs are GatherBlockQuantized's attributes for e.
func (e *quantizedEmbedding) attrs() []*onnx.AttributeProto {
	return []*onnx.AttributeProto{
		onnx.AttrInt("bits", int64(e.q.Bits)), onnx.AttrInt("block_size", int64(e.q.BlockSize)),
		onnx.AttrInt("gather_axis", 0), onnx.AttrInt("quantize_axis", 1),
	}
}

// layer is e's row of the per-weight table.
func (e *quantizedEmbedding) layer(name, format string) Layer {
	return Layer{Name: name, Shape: []int{e.q.N, e.q.K}, Format: format + " (GatherBlockQuantized)",
		BytesBefore: 4 * int64(e.q.N) * int64(e.q.K), BytesAfter: e.q.Bytes(), RelRMS: e.relRMS}
}

// embedBuilder emits a quantised row lookup with the builder: the emitter's
// path (Emitter.Embedding).
func embedBuilder(b *onnx.Builder, s Scheme, name, ids string, table []float32, vocab, hidden int) (string, Layer, error) {
	e, err := quantizeEmbedding(s, table, vocab, hidden)
	if err != nil {
		return "", Layer{}, fmt.Errorf("%s: %w", name, err)
	}
	data := b.Uint8(name+".qweight", e.data, e.q.B)
	scales := b.Float32(name+".scales", e.scales, e.q.Scales)
	b.Opset(onnx.DomainMicrosoft, 1)
	y := b.MS("GatherBlockQuantized", []string{data, ids, scales}, e.attrs()...)
	return y, e.layer(name, s.String()), b.Err()
}

// quantizeGathers is the graph pass's share (QuantizeFile): every Gather on
// axis 0 of a constant float32 [vocab, hidden] initializer becomes a
// GatherBlockQuantized under int4/int8, unless its table or node name is
// kept ("embed"). New initializers are placed in the output's data file and
// returned; replaced nodes and dropped tables are recorded in replaced and
// drop.
func (p *pass) quantizeGathers(res *Result, replaced map[int][]*onnx.NodeProto, drop map[string]bool) ([]*onnx.TensorProto, error) {
	var added []*onnx.TensorProto
	for i, n := range p.g.GetNode() {
		if n.GetOpType() != "Gather" || (n.GetDomain() != "" && n.GetDomain() != "ai.onnx") || len(n.Input) != 2 || onnx.IntAttr(n, "axis", 0) != 0 {
			continue
		}
		if _, done := replaced[i]; done {
			continue
		}
		t, ok := p.inits[n.Input[0]]
		if !ok || len(t.GetDims()) != 2 || onnx.TensorProto_DataType(t.GetDataType()) != onnx.TensorProto_FLOAT {
			continue
		}
		vocab, hidden := int(t.Dims[0]), int(t.Dims[1])
		before := 4 * int64(vocab) * int64(hidden)
		if keepMatch(t.GetName(), p.opts.Keep) || keepMatch(n.GetName(), p.opts.Keep) || !embedQuantizable(p.opts.Scheme, []int{vocab, hidden}) {
			res.Layers = append(res.Layers, Layer{Name: t.GetName(), Shape: []int{vocab, hidden}, Format: "fp32 (kept)", BytesBefore: before, BytesAfter: before})
			continue
		}
		vals, err := TensorFloat32(t, p.srcDir)
		if err != nil {
			return nil, err
		}
		e, err := quantizeEmbedding(p.opts.Scheme, vals, vocab, hidden)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.GetName(), err)
		}
		ins := []string{"", n.Input[1], ""}
		for j, c := range []struct {
			suffix string
			dt     onnx.TensorProto_DataType
			dims   []int64
			raw    []byte
		}{
			{"_qweight", onnx.TensorProto_UINT8, e.data, e.q.B},
			{"_scales", onnx.TensorProto_FLOAT, e.scales, float32Bytes(e.q.Scales)},
		} {
			qt := &onnx.TensorProto{Name: proto.String(t.GetName() + c.suffix), DataType: proto.Int32(int32(c.dt)), Dims: c.dims}
			if _, dup := p.inits[qt.GetName()]; dup {
				qt.Name = proto.String(p.fresh(qt.GetName()))
			}
			if err := p.w.place(qt, c.raw); err != nil {
				return nil, fmt.Errorf("quant: %w", err)
			}
			added = append(added, qt)
			ins[2*j] = qt.GetName()
		}
		replaced[i] = []*onnx.NodeProto{{Name: proto.String(n.GetName() + "_GatherBlockQuantized"), OpType: proto.String("GatherBlockQuantized"),
			Domain: proto.String(onnx.DomainMicrosoft), Input: ins, Output: n.Output, Attribute: e.attrs()}}
		if p.uses[t.GetName()]--; p.uses[t.GetName()] == 0 {
			drop[t.GetName()] = true
		}
		res.Layers = append(res.Layers, e.layer(t.GetName(), p.opts.Scheme.String()))
		p.log.Debug("quantised embedding", "table", t.GetName(), "vocab", vocab, "hidden", hidden, "rel_rms", e.relRMS)
	}
	return added, nil
}
