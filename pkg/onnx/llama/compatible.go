package llama

import (
	"math"
	"strconv"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// compatibleInputs declares Optimum's inputs and derives what
// GroupQueryAttention needs from the attention mask; it returns the
// position input.
//
// GroupQueryAttention keeps each row's valid tokens first: rows are
// right-padded, attention_mask[b] is ones for the row's past plus new
// tokens, then zeros. seqlens_k = sum(mask[b]) − 1; total length =
// mask width.
func (d *decoder) compatibleInputs() string {
	b, c := d.b, d.c
	i64 := onnx.TensorProto_INT64
	mask := b.Input("attention_mask", i64, onnx.Sym("batch"), onnx.Sym("total_sequence_length"))
	pos := b.Input("position_ids", i64, onnx.Sym("batch"), onnx.Sym("seq"))
	past := []onnx.Dim{onnx.Sym("batch"), onnx.Fixed(int64(c.NumKeyValueHeads)), onnx.Sym("past_sequence_length"), onnx.Fixed(int64(c.HeadDim))}
	present := []onnx.Dim{onnx.Sym("batch"), onnx.Fixed(int64(c.NumKeyValueHeads)), onnx.Sym("total_sequence_length"), onnx.Fixed(int64(c.HeadDim))}
	for i := range c.NumHiddenLayers {
		li := strconv.Itoa(i)
		b.Input("past_key_values."+li+".key", onnx.TensorProto_FLOAT, past...)
		b.Input("past_key_values."+li+".value", onnx.TensorProto_FLOAT, past...)
		b.Output("present."+li+".key", onnx.TensorProto_FLOAT, present...)
		b.Output("present."+li+".value", onnx.TensorProto_FLOAT, present...)
	}
	sum := b.Op("ReduceSum", []string{mask, b.Ints(1)}, onnx.AttrInt("keepdims", 0))
	d.seqlensK = b.Op("Cast", []string{b.Op("Sub", []string{sum, b.ScalarInt(1)})}, onnx.AttrInt("to", int64(onnx.TensorProto_INT32)))
	width := b.Op("Gather", []string{b.Op("Shape", []string{mask}), b.ScalarInt(1)}, onnx.AttrInt("axis", 0))
	d.totalLen = b.Op("Cast", []string{width}, onnx.AttrInt("to", int64(onnx.TensorProto_INT32)))
	return pos
}

// compatibleAttention emits com.microsoft.GroupQueryAttention over the
// rotated q, k and v, writing present.i.key/value.
func (d *decoder) compatibleAttention(i int, q, k, v string) string {
	b, c := d.b, d.c
	li := strconv.Itoa(i)
	outs := b.Node(onnx.DomainMicrosoft, "GroupQueryAttention",
		[]string{q, k, v, "past_key_values." + li + ".key", "past_key_values." + li + ".value", d.seqlensK, d.totalLen},
		[]string{"", "present." + li + ".key", "present." + li + ".value"},
		onnx.AttrInt("num_heads", int64(c.NumAttentionHeads)),
		onnx.AttrInt("kv_num_heads", int64(c.NumKeyValueHeads)),
		onnx.AttrFloat("scale", float32(1/math.Sqrt(float64(c.HeadDim)))),
		onnx.AttrInt("do_rotary", 0))
	return outs[0]
}
