package ort

import (
	"encoding/binary"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Hand-built ONNX models for tests, encoded with protowire so the tests need
// neither Python nor generated proto types.

type tNode struct {
	op, domain string
	in, out    []string
	attrs      [][]byte // encoded AttributeProto
}

type tValue struct {
	name  string
	dtype DType
	dims  []any // int64 size or string symbolic name
}

type tInit struct {
	name string
	dims []int64
	f32  []float32
	u8   []uint8 // a uint8 initializer where set
}

type tModel struct {
	opsets       map[string]int64
	nodes        []tNode
	inputs, outs []tValue
	inits        []tInit
}

func msg(fields ...[]byte) []byte {
	var b []byte
	for _, f := range fields {
		b = append(b, f...)
	}
	return b
}

func fBytes(num protowire.Number, v []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func fString(num protowire.Number, s string) []byte { return fBytes(num, []byte(s)) }

func fVarint(num protowire.Number, v int64) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

func attrInt(name string, v int64) []byte {
	return msg(fString(1, name), fVarint(20, 2), fVarint(3, v))
}

func attrFloat(name string, v float32) []byte {
	f := protowire.AppendTag(nil, 2, protowire.Fixed32Type)
	f = protowire.AppendFixed32(f, math.Float32bits(v))
	return msg(fString(1, name), fVarint(20, 1), f)
}

func (v tValue) encode() []byte {
	var shape []byte
	for _, d := range v.dims {
		switch d := d.(type) {
		case int:
			shape = append(shape, fBytes(1, fVarint(1, int64(d)))...)
		case int64:
			shape = append(shape, fBytes(1, fVarint(1, d))...)
		case string:
			shape = append(shape, fBytes(1, fString(2, d))...)
		}
	}
	tensorType := msg(fVarint(1, int64(v.dtype)), fBytes(2, shape))
	return msg(fString(1, v.name), fBytes(2, fBytes(1, tensorType)))
}

func (m tModel) encode() []byte {
	var graph []byte
	for _, n := range m.nodes {
		var nb []byte
		for _, s := range n.in {
			nb = append(nb, fString(1, s)...)
		}
		for _, s := range n.out {
			nb = append(nb, fString(2, s)...)
		}
		nb = append(nb, fString(4, n.op)...)
		for _, a := range n.attrs {
			nb = append(nb, fBytes(5, a)...)
		}
		if n.domain != "" {
			nb = append(nb, fString(7, n.domain)...)
		}
		graph = append(graph, fBytes(1, nb)...)
	}
	graph = append(graph, fString(2, "test")...)
	for _, in := range m.inits {
		var tb []byte
		for _, d := range in.dims {
			tb = append(tb, fVarint(1, d)...)
		}
		dtype, raw := Float32, make([]byte, 4*len(in.f32))
		for i, f := range in.f32 {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
		}
		if in.u8 != nil {
			dtype, raw = Uint8, in.u8
		}
		tb = append(tb, fVarint(2, int64(dtype))...)
		tb = append(tb, fString(8, in.name)...)
		tb = append(tb, fBytes(9, raw)...)
		graph = append(graph, fBytes(5, tb)...)
	}
	for _, v := range m.inputs {
		graph = append(graph, fBytes(11, v.encode())...)
	}
	for _, v := range m.outs {
		graph = append(graph, fBytes(12, v.encode())...)
	}
	model := msg(fVarint(1, 8), fString(2, "edgeinfer-test"), fBytes(7, graph))
	opsets := m.opsets
	if opsets == nil {
		opsets = map[string]int64{"": 17}
	}
	for d, v := range opsets {
		model = append(model, fBytes(8, msg(fString(1, d), fVarint(2, v)))...)
	}
	model = append(model, fBytes(14, msg(fString(1, "purpose"), fString(2, "test")))...)
	return model
}

// addModel: y = x + b, x float32[batch,4], b a constant initializer.
func addModel() []byte {
	return tModel{
		nodes:  []tNode{{op: "Add", in: []string{"x", "b"}, out: []string{"y"}}},
		inputs: []tValue{{name: "x", dtype: Float32, dims: []any{"batch", 4}}},
		outs:   []tValue{{name: "y", dtype: Float32, dims: []any{"batch", 4}}},
		inits:  []tInit{{name: "b", dims: []int64{4}, f32: []float32{10, 20, 30, 40}}},
	}.encode()
}

// slowModel chains n MatMuls of x[size,size] with itself: seconds of work
// that a terminate request interrupts between nodes.
func slowModel(n, size int) []byte {
	m := tModel{
		inputs: []tValue{{name: "x", dtype: Float32, dims: []any{size, size}}},
		outs:   []tValue{{name: "y", dtype: Float32, dims: []any{size, size}}},
	}
	prev := "x"
	for i := range n {
		out := "h" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		if i == n-1 {
			out = "y"
		}
		m.nodes = append(m.nodes, tNode{op: "MatMul", in: []string{prev, "x"}, out: []string{out}})
		prev = out
	}
	return m.encode()
}
