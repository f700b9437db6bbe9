package llama

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// TestLastRowsFused: on the kernel the head takes last_index itself — no
// Add, Unsqueeze, Expand, GatherElements or Reshape left in the graph —
// and gives the logits and greedy tokens of the same graph with the five
// nodes split out again, bit for bit, for two rows of five tokens whose
// last indices differ; an index outside the rows is refused, naming it.
func TestLastRowsFused(t *testing.T) {
	orttest.Need(t)
	c, _ := tinyModel(t)
	fused := tinyGraph(t, Options{BlockSize: 4, Emitter: int4Emitter{}})
	split := proto.Clone(fused).(*onnx.ModelProto)
	if !splitLastRow(split.GetGraph()) {
		t.Fatal("splitLastRow found no head with last_index in the kernel graph")
	}
	for _, op := range []string{"Add", "Unsqueeze", "Expand", "GatherElements", "Reshape"} {
		if n := nodesOf(fused, op, "*"); n != 0 {
			t.Errorf("kernel graph: %d %s nodes, want none", n, op)
		}
		if n := nodesOf(split, op, "*"); n != 1 {
			t.Errorf("split graph: %d %s nodes, want 1", n, op)
		}
	}
	if fuseLastRow(split.GetGraph()); len(split.GetGraph().GetNode()) != len(fused.GetGraph().GetNode()) {
		t.Errorf("split and fused again: %d nodes, the kernel graph %d", len(split.GetGraph().GetNode()), len(fused.GetGraph().GetNode()))
	}
	splitLastRow(split.GetGraph())

	const B, T, bs = 2, 5, 4
	run := func(m *onnx.ModelProto, last []int64) (map[string]outTensor, error) {
		s := graphSession(t, m, 2)
		p := newPool(c, 4, bs)
		r := newRunner(t)
		set(r, "input_ids", []int64{B, T}, randomIDs(7, B*T, c.VocabSize))
		set(r, "position_ids", []int64{B, T}, append(iota64(0, T), iota64(0, T)...))
		tables := [][]int64{{0, 1}, {2, 3}}
		set(r, "block_tables", []int64{B, 2}, append(tables[0], tables[1]...))
		set(r, "context_lens", []int64{B}, []int64{0, 0})
		set(r, "last_index", []int64{B}, last)
		p.feed(r)
		p.slots(r, s, tables, []int{0, 0}, T)
		in := r.in
		out, err := s.Run(context.Background(), in)
		for _, x := range in {
			x.Close()
		}
		if err != nil {
			return nil, err
		}
		defer ort.CloseAll(out)
		res := map[string]outTensor{}
		l, _ := ort.Data[float32](out["logits"])
		g, _ := ort.Data[int64](out[OutputGreedy])
		res["logits"] = outTensor{data: append([]float32(nil), l...)}
		res[OutputGreedy] = outTensor{ints: append([]int64(nil), g...)}
		return res, nil
	}
	last := []int64{4, 2}
	a, err := run(fused, last)
	if err != nil {
		t.Fatal(err)
	}
	want, err := run(split, last)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "logits with the head taking last_index against the five nodes", a["logits"].data, want["logits"].data)
	for i, x := range a[OutputGreedy].ints {
		if x != want[OutputGreedy].ints[i] {
			t.Fatalf("row %d: greedy token %d with the head taking last_index, %d with the five nodes", i, x, want[OutputGreedy].ints[i])
		}
	}
	if _, err := run(fused, []int64{4, T}); err == nil || !strings.Contains(err.Error(), "last_index[1] = 5") {
		t.Fatalf("last_index 5 of 5 rows: err = %v, want one naming last_index[1] = 5", err)
	}
}
