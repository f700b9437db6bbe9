package ort

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestKernelRotaryQKV: ai.edgeinfer.RotaryQKV against
// com.microsoft.RotaryEmbedding on the same q and k (rows of the stacked
// projection, positions anywhere in the caches), against a float64
// reference, and its head-major outputs against the transposes of its own
// k and v; a position outside the caches is refused naming it.
func TestKernelRotaryQKV(t *testing.T) {
	needLib(t)
	const B, T, Hq, Hkv, D, P = 2, 5, 6, 2, 16, 40
	r := rand.New(rand.NewPCG(4, 4))
	width := (Hq + 2*Hkv) * D
	qkv := make([]float32, B*T*width)
	for i := range qkv {
		qkv[i] = float32(r.NormFloat64())
	}
	pos := make([]int64, B*T)
	for i := range pos {
		pos[i] = int64(r.IntN(P))
	}
	cos, sin := rotaryTables(P, D)
	part := func(off, heads int) []float32 { // columns [off, off+heads·D) of each token
		out := make([]float32, 0, B*T*heads*D)
		for i := range B * T {
			out = append(out, qkv[i*width+off:i*width+off+heads*D]...)
		}
		return out
	}
	q, k, v := part(0, Hq), part(Hq*D, Hkv), part((Hq+Hkv)*D, Hkv)
	heads := func(q, kv int64) [][]byte { return [][]byte{attrInt("num_heads", q), attrInt("kv_num_heads", kv)} }
	m := tModel{
		opsets: map[string]int64{"": 17, OpDomain: 1, "com.microsoft": 1},
		inputs: []tValue{{name: "qkv", dtype: Float32, dims: []any{"B", "T", width}}, {name: "pos", dtype: Int64, dims: []any{"B", "T"}},
			{name: "q", dtype: Float32, dims: []any{"B", "T", Hq * D}}, {name: "k", dtype: Float32, dims: []any{"B", "T", Hkv * D}}},
		inits: []tInit{{name: "cos", dims: []int64{P, D / 2}, f32: cos}, {name: "sin", dims: []int64{P, D / 2}, f32: sin}},
		nodes: []tNode{
			{op: "RotaryQKV", domain: OpDomain, in: []string{"qkv", "pos", "cos", "sin"}, out: []string{"rq", "rk", "rv", "kh", "vh"}, attrs: heads(Hq, Hkv)},
			{op: "RotaryEmbedding", domain: "com.microsoft", in: []string{"q", "pos", "cos", "sin"}, out: []string{"mq"}, attrs: [][]byte{attrInt("num_heads", Hq)}},
			{op: "RotaryEmbedding", domain: "com.microsoft", in: []string{"k", "pos", "cos", "sin"}, out: []string{"mk"}, attrs: [][]byte{attrInt("num_heads", Hkv)}},
		},
		outs: []tValue{{name: "rq", dtype: Float32, dims: []any{"B", "T", Hq * D}}, {name: "rk", dtype: Float32, dims: []any{"B", "T", Hkv * D}},
			{name: "rv", dtype: Float32, dims: []any{"B", "T", Hkv * D}}, {name: "kh", dtype: Float32, dims: []any{"B", Hkv, "T", D}},
			{name: "vh", dtype: Float32, dims: []any{"B", Hkv, "T", D}}, {name: "mq", dtype: Float32, dims: []any{"B", "T", Hq * D}},
			{name: "mk", dtype: Float32, dims: []any{"B", "T", Hkv * D}}},
	}
	s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := func(pos []int64) (map[string][]float32, error) {
		out, err := s.Run(context.Background(), map[string]*Tensor{
			"qkv": mustCopy(t, []int64{B, T, int64(width)}, qkv), "pos": mustCopy(t, []int64{B, T}, pos),
			"q": mustCopy(t, []int64{B, T, Hq * D}, q), "k": mustCopy(t, []int64{B, T, Hkv * D}, k)})
		if err != nil {
			return nil, err
		}
		defer CloseAll(out)
		got := map[string][]float32{}
		for name, x := range out {
			d, err := Data[float32](x)
			if err != nil {
				return nil, err
			}
			got[name] = append([]float32(nil), d...)
		}
		return got, nil
	}
	got, err := run(pos)
	if err != nil {
		t.Fatal(err)
	}
	// the reference: float64 rotation of each head's pairs (j, j + D/2)
	rotated := func(x []float32, heads int) []float64 {
		out := make([]float64, len(x))
		for i := range B * T {
			for h := range heads {
				base := (i*heads + h) * D
				for j := range D / 2 {
					c, sn := float64(cos[int(pos[i])*D/2+j]), float64(sin[int(pos[i])*D/2+j])
					a, b := float64(x[base+j]), float64(x[base+j+D/2])
					out[base+j], out[base+j+D/2] = a*c-b*sn, b*c+a*sn
				}
			}
		}
		return out
	}
	worst := func(got []float32, want []float64) float64 {
		w := 0.0
		for i := range got {
			w = max(w, math.Abs(float64(got[i])-want[i]))
		}
		return w
	}
	wantQ, wantK := rotated(q, Hq), rotated(k, Hkv)
	dq, dk, dms := worst(got["rq"], wantQ), worst(got["rk"], wantK), max(maxAbsDiff(got["rq"], got["mq"]), maxAbsDiff(got["rk"], got["mk"]))
	t.Logf("max |RotaryQKV − float64 reference|: q %.2g, k %.2g; |RotaryQKV − com.microsoft.RotaryEmbedding| %.2g", dq, dk, dms)
	if dq > 1e-5 || dk > 1e-5 || dms > 1e-5 {
		t.Errorf("rotated q, k off by %.2g, %.2g (reference) and %.2g (RotaryEmbedding), want ≤ 1e-5", dq, dk, dms)
	}
	if d := maxAbsDiff(got["rv"], v); d != 0 {
		t.Errorf("v is not the projection's v part (off by %g)", d)
	}
	for name, tokenMajor := range map[string][]float32{"kh": got["rk"], "vh": got["rv"]} {
		for b := range B {
			for h := range Hkv {
				for tt := range T {
					for e := range D {
						if x, y := got[name][((b*Hkv+h)*T+tt)*D+e], tokenMajor[((b*T+tt)*Hkv+h)*D+e]; x != y {
							t.Fatalf("%s[%d,%d,%d,%d] = %g, want the token-major output's %g", name, b, h, tt, e, x, y)
						}
					}
				}
			}
		}
	}
	// the out-of-range position, on RotaryQKV alone (RotaryEmbedding would
	// refuse it first)
	m.nodes, m.outs, m.inputs = m.nodes[:1], m.outs[:5], m.inputs[:2]
	only, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	bad := append([]int64(nil), pos...)
	bad[7] = P
	out, err := only.Run(context.Background(), map[string]*Tensor{
		"qkv": mustCopy(t, []int64{B, T, int64(width)}, qkv), "pos": mustCopy(t, []int64{B, T}, bad)})
	if err == nil {
		CloseAll(out)
	}
	if err == nil || !strings.Contains(err.Error(), "position_ids[7] is 40") {
		t.Errorf("position %d of caches of %d: err = %v, want one naming position_ids[7]", P, P, err)
	}
}

// rotaryTables are the cos and sin caches [P, D/2] of positions 0..P-1
// for head size D, base 10000 (what RotaryQKV's cos_cache and sin_cache
// hold in a llama graph).
func rotaryTables(P, D int) (cos, sin []float32) {
	cos, sin = make([]float32, P*D/2), make([]float32, P*D/2)
	for p := range P {
		for j := range D / 2 {
			a := float64(p) / math.Pow(10000, float64(2*j)/float64(D))
			cos[p*D/2+j], sin[p*D/2+j] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}
