package llama

import (
	"encoding/binary"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// What the kernel passes that split a fused node again (splitSwiGLU,
// splitLastRow) and those that recognise a pattern (fuseSwiGLU,
// fuseLastRow) write and read: standard ONNX nodes and 1-D int64
// constants, in a graph already built.

// onnxNode is a standard-domain node named after its one output.
func onnxNode(op string, in []string, out string, attrs ...*onnx.AttributeProto) *onnx.NodeProto {
	return &onnx.NodeProto{OpType: proto.String(op), Domain: proto.String(onnx.DomainONNX), Input: in,
		Output: []string{out}, Name: proto.String(out), Attribute: attrs}
}

// addInt64s appends the 1-D int64 constant v to g as name and returns name.
func addInt64s(g *onnx.GraphProto, name string, v ...int64) string {
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	g.Initializer = append(g.Initializer, &onnx.TensorProto{Name: proto.String(name), Dims: []int64{int64(len(v))},
		DataType: proto.Int32(int32(onnx.TensorProto_INT64)), RawData: raw})
	return name
}

// int64sAre reports whether t is a 1-D int64 constant holding want.
func int64sAre(t *onnx.TensorProto, want ...int64) bool {
	if t == nil || t.GetDataType() != int32(onnx.TensorProto_INT64) {
		return false
	}
	got := t.GetInt64Data()
	if raw := t.GetRawData(); len(got) == 0 && len(raw) == 8*len(want) {
		got = make([]int64, len(want))
		for i := range got {
			got[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
		}
	}
	return slices.Equal(got, want)
}

// initializers is g's initializers by name.
func initializers(g *onnx.GraphProto) map[string]*onnx.TensorProto {
	m := map[string]*onnx.TensorProto{}
	for _, t := range g.GetInitializer() {
		m[t.GetName()] = t
	}
	return m
}
