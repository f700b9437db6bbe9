package ort

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// slotsOf is each (row, token)'s pool slot, as kvcache's Sequence.Slots
// makes them: position ctx[b]+t in block table[b][p/bs] at offset p%bs;
// rows listed in padding get −1 (nothing written).
func (c pagedCase) slotsOf(padding ...int) []int64 {
	s := make([]int64, c.B*c.T)
	for b := range c.B {
		for t := range c.T {
			p := int(c.ctx[b]) + t
			s[b*c.T+t] = c.table[b*c.M+p/c.bs]*int64(c.bs) + int64(p%c.bs)
		}
	}
	for _, b := range padding {
		for t := range c.T {
			s[b*c.T+t] = -1
		}
	}
	return s
}

// scatterInto is the engine's scatter (kvcache's Scatter) of head-major
// keys [B, Hkv, T, D] into a pool [Hkv, N·bs, D], in float32 or as float16
// bits.
func (c pagedCase) scatterInto(pool any, keys []float32, slots []int64) {
	for b := range c.B {
		for h := range c.Hkv {
			for t := range c.T {
				slot := slots[b*c.T+t]
				if slot < 0 {
					continue
				}
				src := keys[((b*c.Hkv+h)*c.T+t)*c.D:][:c.D]
				dst := (h*c.N*c.bs + int(slot)) * c.D
				switch p := pool.(type) {
				case []float32:
					copy(p[dst:], src)
				case []Float16Bits:
					for i, x := range src {
						p[dst+i] = Float16FromFloat32(x)
					}
				}
			}
		}
	}
}

// headMajor turns the plain form's k or v [B, T, Hkv·D] into [B, Hkv, T, D].
func (c pagedCase) headMajor(x []float32) []float32 {
	out := make([]float32, len(x))
	for b := range c.B {
		for t := range c.T {
			for h := range c.Hkv {
				copy(out[((b*c.Hkv+h)*c.T+t)*c.D:][:c.D], x[((b*c.T+t)*c.Hkv+h)*c.D:][:c.D])
			}
		}
	}
	return out
}

// TestPagedAttentionWritesSlots: with slots, PagedAttention writes the
// step's keys and values into the pools itself — the same bits the
// engine's scatter writes (float16 rounding, NaN and overflow included),
// nothing at a padding row's slots, nothing elsewhere — and attends
// exactly as without; in the fused form the keys written are the rotated
// ones the form without slots returns. It refuses slots outside the pool,
// slots with int8 pools, and new_keys outputs beside slots.
func TestPagedAttentionWritesSlots(t *testing.T) {
	needLib(t)
	cases := map[string]pagedCase{
		"decode ragged batch": raggedDecode,
		"float16 pools, decode": {B: 3, T: 1, Hq: 12, Hkv: 4, D: 64, N: 16, bs: 16, M: 3, f16: true,
			ctx: []int64{40, 0, 7}, table: []int64{9, 3, 14, 0, 7, 2, 11, 6, 6}},
		"prefill over a past, 24 tokens": {B: 1, T: 24, Hq: 4, Hkv: 2, D: 20, N: 16, bs: 4, M: 9,
			ctx: []int64{10}, table: []int64{5, 1, 6, 2, 3, 4, 7, 8, 9}},
		"float16 pools, head size 20, two rows of 3": {B: 2, T: 3, Hq: 4, Hkv: 2, D: 20, N: 8, bs: 4, M: 4, f16: true,
			ctx: []int64{13, 2}, table: []int64{5, 1, 6, 7, 0, 2, 3, 4}},
	}
	const P = 64
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, uint64(len(name))))
			d := newPagedData(c, r)
			// A second step's keys and values take values float16 rounds in
			// every way — ties, subnormals, overflow, infinities and NaN —
			// where only the pools are compared (attention over NaN is NaN).
			special := newPagedData(c, r)
			special.kc, special.vc, special.kc16, special.vc16 = d.kc, d.vc, d.kc16, d.vc16
			for i, x := range []float32{float32(math.NaN()), float32(math.Inf(-1)), 70000, -65520, 65519, 1 + 1.0/2048,
				1 + 3.0/2048, 3e-6, -6e-8, 2.9e-8, 1e-9} {
				special.k[3+7*i], special.v[5+11*i] = x, -x
			}
			qkv, pos, width := c.fusedInputs(r)
			padding := []int{}
			if c.B > 2 {
				padding = append(padding, 1)
			}
			slots := c.slotsOf(padding...)
			cos, sin := rotaryTables(P, c.D)
			pool := c.poolType()
			heads := [][]byte{attrInt("num_heads", int64(c.Hq)), attrInt("kv_num_heads", int64(c.Hkv))}
			kvDims := []any{"B", c.Hkv, "T", c.D}
			oDims := []any{"B", "T", c.Hq * c.D}
			// Two graphs over pools of their own: the plain form with slots,
			// and the fused form with slots beside the fused form without.
			plain := tModel{
				opsets: map[string]int64{"": 17, OpDomain: 1},
				inputs: []tValue{{name: "q", dtype: Float32, dims: oDims}, {name: "k", dtype: Float32, dims: []any{"B", "T", c.Hkv * c.D}},
					{name: "v", dtype: Float32, dims: []any{"B", "T", c.Hkv * c.D}},
					{name: "kc", dtype: pool, dims: []any{c.Hkv, "N", c.bs, c.D}}, {name: "vc", dtype: pool, dims: []any{c.Hkv, "N", c.bs, c.D}},
					{name: "bt", dtype: Int64, dims: []any{"B", "M"}}, {name: "cl", dtype: Int64, dims: []any{"B"}},
					{name: "slots", dtype: Int64, dims: []any{"B", "T"}}},
				nodes: []tNode{{op: "PagedAttention", domain: OpDomain, attrs: heads, out: []string{"o"},
					in: []string{"q", "k", "v", "kc", "vc", "bt", "cl", "", "", "", "", "", "slots"}}},
				outs: []tValue{{name: "o", dtype: Float32, dims: oDims}},
			}
			fused := tModel{
				opsets: map[string]int64{"": 17, OpDomain: 1},
				inputs: []tValue{{name: "qkv", dtype: Float32, dims: []any{"B", "T", width}}, {name: "pos", dtype: Int64, dims: []any{"B", "T"}},
					{name: "kc", dtype: pool, dims: []any{c.Hkv, "N", c.bs, c.D}}, {name: "vc", dtype: pool, dims: []any{c.Hkv, "N", c.bs, c.D}},
					{name: "bt", dtype: Int64, dims: []any{"B", "M"}}, {name: "cl", dtype: Int64, dims: []any{"B"}},
					{name: "slots", dtype: Int64, dims: []any{"B", "T"}}},
				inits: []tInit{{name: "cos", dims: []int64{P, int64(c.D / 2)}, f32: cos}, {name: "sin", dims: []int64{P, int64(c.D / 2)}, f32: sin}},
				nodes: []tNode{
					{op: "PagedAttention", domain: OpDomain, attrs: heads, out: []string{"fo", "kh", "vh"},
						in: []string{"qkv", "", "", "kc", "vc", "bt", "cl", "", "", "pos", "cos", "sin"}},
					{op: "PagedAttention", domain: OpDomain, attrs: heads, out: []string{"wo"},
						in: []string{"qkv", "", "", "kc", "vc", "bt", "cl", "", "", "pos", "cos", "sin", "slots"}},
				},
				outs: []tValue{{name: "fo", dtype: Float32, dims: oDims}, {name: "wo", dtype: Float32, dims: oDims},
					{name: "kh", dtype: Float32, dims: kvDims}, {name: "vh", dtype: Float32, dims: kvDims}},
			}
			ctx := context.Background()
			for form, m := range map[string]tModel{"plain": plain, "fused": fused, "plain, special values": plain} {
				s, err := NewSession(ctx, m.encode(), Options{IntraOpThreads: 2})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				d := d
				if form == "plain, special values" {
					d = special
				}
				in := c.tensors(t, d, true)
				in["slots"] = mustCopy(t, []int64{int64(c.B), int64(c.T)}, slots)
				if form == "fused" {
					delete(in, "q")
					delete(in, "k")
					delete(in, "v")
					in["qkv"] = mustCopy(t, []int64{int64(c.B), int64(c.T), int64(width)}, qkv)
					in["pos"] = mustCopy(t, []int64{int64(c.B), int64(c.T)}, pos)
				}
				out, err := s.Run(ctx, in)
				if err != nil {
					t.Fatalf("%s: %v", form, err)
				}
				defer CloseAll(out)
				newK, newV := c.headMajor(d.k), c.headMajor(d.v)
				if form == "fused" {
					newK, newV = mustData(t, out["kh"]), mustData(t, out["vh"])
					if dd := maxAbsDiff(mustData(t, out["fo"]), mustData(t, out["wo"])); dd != 0 {
						t.Errorf("fused: attention with slots differs from without by %g", dd)
					}
				} else if form == "plain" {
					if dd := maxAbsDiff(mustData(t, out["o"]), c.reference(d)); dd > 1e-5 {
						t.Errorf("plain: max |kernel − reference| = %g, want ≤ 1e-5", dd)
					}
				}
				for kind, src := range map[string][]float32{"kc": newK, "vc": newV} {
					if c.f16 {
						want := append([]Float16Bits(nil), map[string][]Float16Bits{"kc": d.kc16, "vc": d.vc16}[kind]...)
						c.scatterInto(want, src, slots)
						got, err := Data[Float16Bits](in[kind])
						if err != nil {
							t.Fatal(err)
						}
						if i := firstDiff(got, want); i >= 0 {
							t.Errorf("%s: pool %s element %d is %#04x, the engine's scatter writes %#04x", form, kind, i, got[i], want[i])
						}
						continue
					}
					want := append([]float32(nil), map[string][]float32{"kc": d.kc, "vc": d.vc}[kind]...)
					c.scatterInto(want, src, slots)
					got := mustData(t, in[kind])
					if i := firstDiff(got, want); i >= 0 {
						t.Errorf("%s: pool %s element %d is %g, the engine's scatter writes %g", form, kind, i, got[i], want[i])
					}
				}
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		c := pagedCase{B: 1, T: 1, Hq: 2, Hkv: 1, D: 8, N: 4, bs: 4, M: 2, ctx: []int64{3}, table: []int64{0, 1}}
		model := func(pool DType, outs int) []byte {
			m := tModel{
				opsets: map[string]int64{"": 17, OpDomain: 1},
				inputs: []tValue{{name: "q", dtype: Float32, dims: []any{1, 1, 16}}, {name: "k", dtype: Float32, dims: []any{1, 1, 8}},
					{name: "v", dtype: Float32, dims: []any{1, 1, 8}}, {name: "kc", dtype: pool, dims: []any{1, 4, 4, 8}},
					{name: "vc", dtype: pool, dims: []any{1, 4, 4, 8}}, {name: "bt", dtype: Int64, dims: []any{1, 2}}, {name: "cl", dtype: Int64, dims: []any{1}},
					{name: "slots", dtype: Int64, dims: []any{"B", "T"}}},
				nodes: []tNode{{op: "PagedAttention", domain: OpDomain, out: []string{"o", "nk", "nv"}[:outs],
					in:    []string{"q", "k", "v", "kc", "vc", "bt", "cl", "", "", "", "", "", "slots"},
					attrs: [][]byte{attrInt("num_heads", 2), attrInt("kv_num_heads", 1)}}},
				outs: []tValue{{name: "o", dtype: Float32, dims: []any{1, 1, 16}}, {name: "nk", dtype: Float32, dims: []any{1, 1, 1, 8}},
					{name: "nv", dtype: Float32, dims: []any{1, 1, 1, 8}}}[:outs],
			}
			if pool == Int8 {
				m.inputs = append(m.inputs, tValue{name: "ks", dtype: Float32, dims: []any{1, 4}}, tValue{name: "vs", dtype: Float32, dims: []any{1, 4}})
				m.nodes[0].in[7], m.nodes[0].in[8] = "ks", "vs"
			}
			return m.encode()
		}
		for _, tc := range []struct {
			name  string
			int8  bool
			outs  int
			slots []int64
			want  string
		}{
			{"a slot past the pool", false, 1, []int64{16}, "slots[0] = 16 is outside the pool's 16 slots"},
			{"slots of the wrong shape", false, 1, []int64{4, 5}, "slots"},
			{"int8 pools", true, 1, []int64{4}, "slots with int8 pools"},
			{"new_keys beside slots", false, 3, []int64{4}, "any form with slots (the node writes the pools), has one"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cc := c
				cc.int8 = tc.int8
				pool := cc.poolType()
				s, err := NewSession(context.Background(), model(pool, tc.outs), Options{IntraOpThreads: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				d := newPagedData(cc, rand.New(rand.NewPCG(1, 1)))
				in := cc.tensors(t, d, true)
				in["slots"] = mustCopy(t, []int64{1, int64(len(tc.slots))}, tc.slots)
				before := append([]float32(nil), d.kc...)
				_, err = s.Run(context.Background(), in)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want one containing %q", err, tc.want)
				}
				if !tc.int8 {
					if i := firstDiff(mustData(t, in["kc"]), before); i >= 0 {
						t.Errorf("a refused step wrote the key pool (element %d)", i)
					}
				}
			})
		}
	})
}

// mustData is a float tensor's data.
func mustData(tb testing.TB, x *Tensor) []float32 {
	tb.Helper()
	v, err := Data[float32](x)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// firstDiff is the first index where a and b differ bitwise (NaNs of the
// same bits are equal), −1 for none; a length difference is at the
// shorter length.
func firstDiff[T float32 | Float16Bits](a, b []T) int {
	for i := range min(len(a), len(b)) {
		x, y := any(a[i]), any(b[i])
		if fx, ok := x.(float32); ok {
			if math.Float32bits(fx) != math.Float32bits(y.(float32)) {
				return i
			}
			continue
		}
		if x != y {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
