package onnx

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// addModel builds y = x + w with w an initializer of n floats.
func addModel(t *testing.T, b *Builder, n int) {
	t.Helper()
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(i)
	}
	x := b.Input("x", TensorProto_FLOAT, Sym("batch"), Fixed(int64(n)))
	wn := b.Float32("w", []int64{int64(n)}, w)
	b.Node(DomainONNX, "Add", []string{x, wn}, []string{"y"})
	b.Output("y", TensorProto_FLOAT, Sym("batch"), Fixed(int64(n)))
}

func TestBuilderInspectRoundTrip(t *testing.T) {
	b := NewBuilder("add")
	b.Opset(DomainMicrosoft, 1)
	b.SetProducer("edgeinfer", "test")
	b.Metadata("k", "v")
	addModel(t, b, 8)
	b.Int64("shape", []int64{2}, []int64{1, 8})
	b.Float16("h", []int64{2}, []uint16{0x3c00, 0x4000})
	b.Int8("i8", []int64{3}, []int8{-1, 0, 1})
	b.Uint8("u8", []int64{1}, []uint8{7})
	b.Int32("i32", []int64{1}, []int32{7})
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Inspect(data)
	if err != nil {
		t.Fatal(err)
	}
	if r.Params != 8+2+2+3+1+1 {
		t.Errorf("params = %d", r.Params)
	}
	if r.Bytes != 32+16+4+3+1+4 {
		t.Errorf("bytes = %d", r.Bytes)
	}
	if r.Ops["Add"] != 1 || r.Nodes != 1 {
		t.Errorf("ops = %v", r.Ops)
	}
	if !slices.Contains(r.Opsets, OpsetInfo{DomainMicrosoft, 1}) || !slices.Contains(r.Opsets, OpsetInfo{"", DefaultOpset}) {
		t.Errorf("opsets = %v", r.Opsets)
	}
	in, ok := r.Input("x")
	if !ok || in.Type != "float32" || !slices.Equal(in.Shape, []string{"batch", "8"}) {
		t.Errorf("input = %+v", in)
	}
	if len(r.Inputs) != 1 || len(r.Outputs) != 1 || r.Metadata["k"] != "v" {
		t.Errorf("report = %+v", r)
	}
}

func TestBuilderErrors(t *testing.T) {
	tests := []struct {
		name  string
		build func(b *Builder)
	}{
		{"duplicate value", func(b *Builder) {
			b.Input("x", TensorProto_FLOAT)
			b.Float32("x", []int64{1}, []float32{1})
		}},
		{"shape mismatch", func(b *Builder) { b.Float32("w", []int64{2, 2}, []float32{1}) }},
		{"undefined input", func(b *Builder) { b.Op("Relu", []string{"nope"}) }},
		{"unproduced output", func(b *Builder) { b.Output("y", TensorProto_FLOAT) }},
		{"negative dim", func(b *Builder) { b.Float32("w", []int64{-1}, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBuilder("bad")
			tt.build(b)
			if _, err := b.Marshal(); !errors.Is(err, ErrBuild) {
				t.Fatalf("err = %v, want ErrBuild", err)
			}
		})
	}
}

// TestBuilderModelReadsTheGraph: Model checks the graph outputs against
// the graph as it is, after a pass rewrote it in place: a node output made
// a graph output is accepted, an output whose node was removed refused.
func TestBuilderModelReadsTheGraph(t *testing.T) {
	b := NewBuilder("rewritten")
	x := b.Input("x", TensorProto_FLOAT, Fixed(2))
	y := b.Op("Relu", []string{x})
	b.Output(y, TensorProto_FLOAT, Fixed(2))
	m, err := b.Model()
	if err != nil {
		t.Fatal(err)
	}
	n := m.GetGraph().GetNode()[0]
	n.Output = append(n.Output, "extra")
	m.Graph.Output = append(m.Graph.Output, valueInfo("extra", TensorProto_FLOAT, []Dim{Fixed(2)}))
	if _, err := b.Model(); err != nil {
		t.Fatalf("a node's new output as a graph output: %v", err)
	}
	m.Graph.Node = nil
	if _, err := b.Model(); !errors.Is(err, ErrBuild) {
		t.Fatalf("outputs whose node was removed: err = %v, want ErrBuild", err)
	}
}

func TestExternalData(t *testing.T) {
	var data bytes.Buffer
	b := NewBuilder("ext")
	b.SetExternalData(&data, "model.onnx.data", 64)
	addModel(t, b, 100)                                 // 400 B: external
	b.Float32("small", []int64{2}, []float32{1, 2})     // inline
	b.Float32("big2", []int64{20}, make([]float32, 20)) // 80 B: external, page aligned
	model, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := data.Len(), 4096+80; got != want {
		t.Errorf("data file %d bytes, want %d", got, want)
	}
	if b.ExternalBytes() != int64(data.Len()) {
		t.Errorf("ExternalBytes = %d", b.ExternalBytes())
	}
	r, err := Inspect(model)
	if err != nil {
		t.Fatal(err)
	}
	if r.ExternalBytes != 480 || r.Bytes != 488 {
		t.Errorf("external %d total %d", r.ExternalBytes, r.Bytes)
	}
	if len(model) > 400 {
		t.Errorf("model is %d bytes: weights were not moved out", len(model))
	}
}

func TestInspectCorrupt(t *testing.T) {
	b := NewBuilder("add")
	addModel(t, b, 4)
	good, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, {0xff}, good[:len(good)/2], []byte("not a model at all")} {
		if _, err := Inspect(bad); !errors.Is(err, ErrInvalidModel) {
			t.Errorf("Inspect(%q) err = %v", bad, err)
		}
	}
}

func FuzzInspect(f *testing.F) {
	b := NewBuilder("add")
	w := []float32{1, 2}
	x := b.Input("x", TensorProto_FLOAT, Sym("n"), Fixed(2))
	b.Node(DomainONNX, "Add", []string{x, b.Float32("w", []int64{2}, w)}, []string{"y"})
	b.Output("y", TensorProto_FLOAT, Sym("n"), Fixed(2))
	good, _ := b.Marshal()
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x3a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Inspect(data)
		if err != nil {
			return
		}
		if r.Params < 0 || r.Bytes < 0 || r.Nodes < 0 {
			t.Fatalf("negative sizes: %+v", r)
		}
		_ = r.OpHistogram()
	})
}
