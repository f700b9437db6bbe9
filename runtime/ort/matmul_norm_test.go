package ort

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestKernelMatMulQ4Norm: the RMSNorm in front of a projection — norm
// weight (input 4), and skip (input 5) with the sum as output 1 — against
// ONNX Runtime's own SimplifiedLayerNormalization or
// SkipSimplifiedLayerNormalization feeding com.microsoft.MatMulNBits at
// accuracy_level 4, on every variant, int4 and int8, with swiglu too. The
// sum must be the same floats; the product within the quantisation bound
// of both sides (twice the bound of the exact product on the normalised
// activations, as TestKernelMatMulQ4Variants allows), computed here in
// float64 from the normalised activations.
func TestKernelMatMulQ4Norm(t *testing.T) {
	needLib(t)
	type prepared struct {
		c          *q4Case
		skip       []float32
		s          *Session
		withSkip   bool
		bound, mag []float64
	}
	const eps = 1e-5
	var all []*prepared
	r := rand.New(rand.NewPCG(11, 3))
	for _, bits := range []int{4, 8} {
		for _, sh := range []struct{ M, N, K int }{{1, 64, 256}, {3, 40, 100}, {9, 24, 544}, {1, 32, 2048}} {
			for _, withSkip := range []bool{false, true} {
				c := newNBitsCase(bits, sh.M, sh.N, sh.K, r)
				gamma := make([]float32, c.K)
				for i := range gamma {
					gamma[i] = 0.5 + r.Float32()
				}
				p := &prepared{c: c, withSkip: withSkip, skip: make([]float32, c.M*c.K)}
				for i := range p.skip {
					p.skip[i] = float32(3 * r.NormFloat64())
				}
				nb := int64(c.nb())
				attrs := []([]byte){attrInt("K", int64(c.K)), attrInt("N", int64(c.N)), attrInt("bits", int64(bits)),
					attrInt("block_size", 32)}
				m := tModel{
					opsets: map[string]int64{"": 18, OpDomain: 1, "com.microsoft": 1},
					inputs: []tValue{{name: "a", dtype: Float32, dims: []any{"M", c.K}}, {name: "s", dtype: Float32, dims: []any{"M", c.K}}},
					inits: []tInit{{name: "b", dims: []int64{int64(c.N), nb, int64(4 * bits)}, u8: c.b},
						{name: "scales", dims: []int64{int64(c.N) * nb}, f32: c.scales}, {name: "gamma", dims: []int64{int64(c.K)}, f32: gamma}},
					outs: []tValue{{name: "y", dtype: Float32, dims: []any{"M", c.N}}, {name: "y4", dtype: Float32, dims: []any{"M", c.N}}},
				}
				ours := tNode{op: "MatMulNBits", domain: OpDomain, in: []string{"a", "b", "scales", "", "gamma"}, out: []string{"y"},
					attrs: append(attrs, attrFloat("epsilon", eps))}
				norm := tNode{op: "SimplifiedLayerNormalization", in: []string{"a", "gamma"}, out: []string{"n"},
					attrs: [][]byte{attrInt("axis", -1), attrFloat("epsilon", eps)}}
				if withSkip {
					ours.in, ours.out = append(ours.in, "s"), append(ours.out, "sum")
					norm = tNode{op: "SkipSimplifiedLayerNormalization", domain: "com.microsoft", in: []string{"a", "s", "gamma"},
						out: []string{"n", "", "", "sum4"}, attrs: [][]byte{attrFloat("epsilon", eps)}}
					m.outs = append(m.outs, tValue{name: "sum", dtype: Float32, dims: []any{"M", c.K}},
						tValue{name: "sum4", dtype: Float32, dims: []any{"M", c.K}})
				} else {
					m.inputs = m.inputs[:1]
				}
				m.nodes = []tNode{ours, norm, {op: "MatMulNBits", domain: "com.microsoft", in: []string{"n", "b", "scales"},
					out: []string{"y4"}, attrs: append(attrs, attrInt("accuracy_level", 4))}}
				s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 2})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				p.s = s
				// the normalised activations in float64, as the case's a
				normed := &q4Case{M: c.M, N: c.N, K: c.K, bits: bits, b: c.b, scales: c.scales, a: make([]float32, c.M*c.K)}
				for row := range c.M {
					var ss float64
					x := make([]float64, c.K)
					for k := range c.K {
						x[k] = float64(c.a[row*c.K+k])
						if withSkip {
							x[k] = float64(c.a[row*c.K+k] + p.skip[row*c.K+k])
						}
						ss += x[k] * x[k]
					}
					inv := 1 / math.Sqrt(ss/float64(c.K)+eps)
					for k := range c.K {
						normed.a[row*c.K+k] = float32(x[k] * inv * float64(gamma[k]))
					}
				}
				_, _, p.bound, p.mag = normed.reference()
				all = append(all, p)
			}
		}
	}
	forEachVariant(t, "int4 matmul", q4Compiled(), q4Variants(), q4Variant(), useQ4Variant, func(t *testing.T, v string) {
		worst := 0.0
		for _, p := range all {
			feeds := map[string]*Tensor{"a": mustCopy(t, []int64{int64(p.c.M), int64(p.c.K)}, p.c.a)}
			if p.withSkip {
				feeds["s"] = mustCopy(t, []int64{int64(p.c.M), int64(p.c.K)}, p.skip)
			}
			got := runOutputs(t, p.s, feeds)
			CloseAll(feeds)
			for i := range got["y"] {
				// both sides quantise the normalised row: each within its bound
				// of the exact product, plus float rounding of the norm itself
				allow := 2*p.bound[i] + 1e-4*p.mag[i] + 1e-6
				worst = max(worst, math.Abs(float64(got["y"][i]-got["y4"][i]))/allow)
			}
			if p.withSkip {
				for i := range got["sum"] {
					if got["sum"][i] != got["sum4"][i] {
						t.Fatalf("%s, M %d K %d: sum[%d] = %g, SkipSimplifiedLayerNormalization's %g", v, p.c.M, p.c.K, i,
							got["sum"][i], got["sum4"][i])
					}
				}
			}
		}
		t.Logf("%s norm+matmul vs SimplifiedLayerNormalization/SkipSimplifiedLayerNormalization+MatMulNBits: worst %.3f of the allowance", v, worst)
		if worst > 1 {
			t.Errorf("%s: the fused norm's product is off by %.2f times the allowance", v, worst)
		}
	})
}

// TestKernelMatMulQ4NormRefuses: a norm weight of the wrong length, or a
// skip without a norm weight, is refused naming the input.
func TestKernelMatMulQ4NormRefuses(t *testing.T) {
	needLib(t)
	c := newQ4Case(2, 8, 64, rand.New(rand.NewPCG(1, 1)))
	for name, tc := range map[string]struct {
		in    []string
		gamma int
		want  string
	}{
		"norm weight of 63 values": {in: []string{"a", "b", "scales", "", "gamma"}, gamma: 63, want: "norm weight (input 4)"},
		"skip without norm weight": {in: []string{"a", "b", "scales", "", "", "a"}, gamma: 64, want: "skip (input 5) needs the norm weight"},
	} {
		t.Run(name, func(t *testing.T) {
			m := tModel{
				opsets: map[string]int64{"": 17, OpDomain: 1},
				inputs: []tValue{{name: "a", dtype: Float32, dims: []any{"M", c.K}}},
				inits: []tInit{{name: "b", dims: []int64{8, 2, 16}, u8: c.b}, {name: "scales", dims: []int64{16}, f32: c.scales},
					{name: "gamma", dims: []int64{int64(tc.gamma)}, f32: make([]float32, tc.gamma)}},
				nodes: []tNode{{op: "MatMulNBits", domain: OpDomain, in: tc.in, out: []string{"y", "sum"},
					attrs: [][]byte{attrInt("K", 64), attrInt("N", 8), attrInt("bits", 4), attrInt("block_size", 32)}}},
				outs: []tValue{{name: "y", dtype: Float32, dims: []any{"M", 8}}, {name: "sum", dtype: Float32, dims: []any{"M", 64}}},
			}
			s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 1})
			if err == nil {
				a := mustCopy(t, []int64{int64(c.M), int64(c.K)}, c.a)
				var out map[string]*Tensor
				out, err = s.Run(context.Background(), map[string]*Tensor{"a": a})
				CloseAll(out)
				a.Close()
				s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// BenchmarkMatMulQ4NormRow times a decode row's fused norm: one node with
// the norm and skip in front of a product of eight outputs (the product
// a small part), K 768 and 2048 (synthetic-110m's and -1b's width), one
// intra-op thread, from the cache.
func BenchmarkMatMulQ4NormRow(b *testing.B) {
	needLib(b)
	for _, K := range []int{768, 2048} {
		b.Run(fmt.Sprintf("K%d", K), func(b *testing.B) {
			c := newNBitsCase(4, 1, 8, K, rand.New(rand.NewPCG(3, uint64(K))))
			gamma := make([]float32, K)
			for i := range gamma {
				gamma[i] = 1
			}
			m := tModel{
				opsets: map[string]int64{"": 18, OpDomain: 1},
				inputs: []tValue{{name: "a", dtype: Float32, dims: []any{1, K}}, {name: "s", dtype: Float32, dims: []any{1, K}}},
				inits: []tInit{{name: "b", dims: []int64{int64(c.N), int64(c.nb()), 16}, u8: c.b},
					{name: "scales", dims: []int64{int64(c.N) * int64(c.nb())}, f32: c.scales}, {name: "gamma", dims: []int64{int64(K)}, f32: gamma}},
				outs: []tValue{{name: "y", dtype: Float32, dims: []any{1, c.N}}, {name: "sum", dtype: Float32, dims: []any{1, K}}},
				nodes: []tNode{{op: "MatMulNBits", domain: OpDomain, in: []string{"a", "b", "scales", "", "gamma", "s"}, out: []string{"y", "sum"},
					attrs: [][]byte{attrInt("K", int64(K)), attrInt("N", int64(c.N)), attrInt("bits", 4), attrInt("block_size", 32), attrFloat("epsilon", 1e-5)}}},
			}
			s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			in := map[string]*Tensor{"a": mustCopy(b, []int64{1, int64(K)}, c.a), "s": mustCopy(b, []int64{1, int64(K)}, c.a)}
			out := map[string]*Tensor{}
			for name, n := range map[string]int{"y": c.N, "sum": K} {
				t, err := NewEmptyTensor(Float32, []int64{1, int64(n)})
				if err != nil {
					b.Fatal(err)
				}
				defer t.Close()
				out[name] = t
			}
			runBound(b, s, in, out)
		})
	}
}
