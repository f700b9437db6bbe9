package ort

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// gatherModel is a table of V rows of H columns, bits wide in blocks of
// block, under ai.edgeinfer's GatherBlockQuantized (y) and, with ref,
// com.microsoft's (ref) on the same inputs, indices of dtype idx shaped
// [2, "n"].
func gatherModel(V, H, bits, block int, idx DType, ref bool, r *rand.Rand) []byte {
	data := make([]uint8, V*H*bits/8)
	for i := range data {
		data[i] = uint8(r.IntN(256))
	}
	scales := make([]float32, V*H/block)
	for i := range scales {
		scales[i] = float32(r.NormFloat64()) / 16
	}
	attrs := [][]byte{attrInt("bits", int64(bits)), attrInt("block_size", int64(block)), attrInt("gather_axis", 0), attrInt("quantize_axis", 1)}
	in := []string{"data", "ids", "scales"}
	m := tModel{
		opsets: map[string]int64{"": 17, OpDomain: 1, "com.microsoft": 1},
		inputs: []tValue{{name: "ids", dtype: idx, dims: []any{2, "n"}}},
		inits: []tInit{{name: "data", dims: []int64{int64(V), int64(H * bits / 8)}, u8: data},
			{name: "scales", dims: []int64{int64(V), int64(H / block)}, f32: scales}},
		nodes: []tNode{{op: "GatherBlockQuantized", domain: OpDomain, in: in, out: []string{"y"}, attrs: attrs}},
		outs:  []tValue{{name: "y", dtype: Float32, dims: []any{2, "n", H}}},
	}
	if ref {
		m.nodes = append(m.nodes, tNode{op: "GatherBlockQuantized", domain: "com.microsoft", in: in, out: []string{"ref"}, attrs: attrs})
		m.outs = append(m.outs, tValue{name: "ref", dtype: Float32, dims: []any{2, "n", H}})
	}
	return m.encode()
}

// TestKernelGatherBlockQuantized: the rows ai.edgeinfer's
// GatherBlockQuantized gives are com.microsoft's, bit for bit — int4 and
// int8, blocks of 16, 32 and 128, int64 and int32 indices, negative ones
// counted from the end, a decode step's few and a prefill chunk's many
// (the pool's path) — and an index outside the table is refused, named.
func TestKernelGatherBlockQuantized(t *testing.T) {
	needLib(t)
	r := rand.New(rand.NewPCG(4, 4))
	const V, H = 97, 256
	for _, bits := range []int{4, 8} {
		for _, block := range []int{16, 32, 128} {
			for _, idx := range []DType{Int64, Int32} {
				s, err := NewSession(context.Background(), gatherModel(V, H, bits, block, idx, true, r), Options{IntraOpThreads: 2})
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range []int{1, 3, 40} {
					ids := make([]int64, 2*n)
					for i := range ids {
						ids[i] = int64(r.IntN(2*V) - V) // [−V, V)
					}
					ids[0], ids[len(ids)-1] = V-1, -V
					got := runGather(t, s, idx, n, ids)
					if err := got.err; err != nil {
						t.Fatal(err)
					}
					for i, y := range got.y {
						if math.Float32bits(y) != math.Float32bits(got.ref[i]) {
							t.Fatalf("bits %d block %d n %d (%s indices): element %d is %g, com.microsoft's %g", bits, block, n, idx, i, y, got.ref[i])
						}
					}
				}
				s.Close()
				ours, err := NewSession(context.Background(), gatherModel(V, H, bits, block, idx, false, r), Options{IntraOpThreads: 2})
				if err != nil {
					t.Fatal(err)
				}
				got := runGather(t, ours, idx, 1, []int64{3, V})
				if got.err == nil || !strings.Contains(got.err.Error(), "indices[1] = 97") {
					t.Errorf("index %d of %d rows: err = %v, want one naming indices[1] = 97", V, V, got.err)
				}
				ours.Close()
			}
		}
	}
}

type gathered struct {
	y, ref []float32
	err    error
}

func runGather(t *testing.T, s *Session, idx DType, n int, ids []int64) gathered {
	t.Helper()
	var x *Tensor
	var err error
	if idx == Int32 {
		v := make([]int32, len(ids))
		for i, id := range ids {
			v[i] = int32(id)
		}
		x, err = CopyTensor([]int64{2, int64(n)}, v)
	} else {
		x, err = CopyTensor([]int64{2, int64(n)}, ids)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	out, err := s.Run(context.Background(), map[string]*Tensor{"ids": x})
	if err != nil {
		return gathered{err: err}
	}
	defer CloseAll(out)
	y, _ := Data[float32](out["y"])
	ref, _ := Data[float32](out["ref"])
	return gathered{y: append([]float32(nil), y...), ref: append([]float32(nil), ref...)}
}

// TestKernelGatherBlockQuantizedRefuses: what the kernel does not run is
// refused when the session loads, naming com.microsoft's operator.
func TestKernelGatherBlockQuantizedRefuses(t *testing.T) {
	needLib(t)
	m := tModel{
		opsets: map[string]int64{"": 17, OpDomain: 1},
		inputs: []tValue{{name: "ids", dtype: Int64, dims: []any{1}}},
		inits:  []tInit{{name: "data", dims: []int64{4, 16}, u8: make([]uint8, 64)}, {name: "scales", dims: []int64{4, 4}, f32: make([]float32, 16)}},
		nodes: []tNode{{op: "GatherBlockQuantized", domain: OpDomain, in: []string{"data", "ids", "scales"}, out: []string{"y"},
			attrs: [][]byte{attrInt("bits", 2), attrInt("block_size", 16)}}},
		outs: []tValue{{name: "y", dtype: Float32, dims: []any{1, 64}}},
	}
	s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 1})
	if err == nil {
		s.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "com.microsoft.GatherBlockQuantized") {
		t.Fatalf("bits 2: err = %v, want one naming com.microsoft.GatherBlockQuantized", err)
	}
}
