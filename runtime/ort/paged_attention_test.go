package ort

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
)

// pagedCase is one call of ai.edgeinfer.PagedAttention: B rows of T new
// tokens, Hq query and Hkv KV heads of size D, a pool of N blocks of bs
// slots, and per row its context length and block table (M entries).
type pagedCase struct {
	B, T, Hq, Hkv, D, N, bs, M int
	int8, f16                  bool
	ctx                        []int64
	table                      []int64 // [B, M]
}

// raggedDecode is a decode batch of three rows with contexts 17, 0 and 5
// over scattered blocks (one row's table repeats a block past its context),
// three query heads to a KV head and D 64: every attention test has it.
var raggedDecode = pagedCase{B: 3, T: 1, Hq: 12, Hkv: 4, D: 64, N: 16, bs: 4, M: 5,
	ctx: []int64{17, 0, 5}, table: []int64{9, 3, 14, 0, 7, 2, 2, 2, 2, 2, 11, 6, 6, 6, 6}}

// pagedModel is a graph of the one operator with the case's geometry.
func pagedModel(c pagedCase) []byte {
	pool := c.poolType()
	in := []tValue{
		{name: "q", dtype: Float32, dims: []any{"B", "T", c.Hq * c.D}},
		// symbolic widths, so that the kernel's own shape checks are reached
		{name: "k", dtype: Float32, dims: []any{"B", "T", "Wk"}},
		{name: "v", dtype: Float32, dims: []any{"B", "T", "Wv"}},
		{name: "kc", dtype: pool, dims: []any{c.Hkv, "N", c.bs, c.D}},
		{name: "vc", dtype: pool, dims: []any{c.Hkv, "N", c.bs, c.D}},
		{name: "bt", dtype: Int64, dims: []any{"B", "M"}},
		{name: "cl", dtype: Int64, dims: []any{"B"}},
	}
	names := []string{"q", "k", "v", "kc", "vc", "bt", "cl"}
	if c.int8 {
		in = append(in, tValue{name: "ks", dtype: Float32, dims: []any{c.Hkv, "N"}},
			tValue{name: "vs", dtype: Float32, dims: []any{c.Hkv, "N"}})
		names = append(names, "ks", "vs")
	}
	return tModel{
		opsets: map[string]int64{"": 17, OpDomain: 1},
		nodes: []tNode{{op: "PagedAttention", domain: OpDomain, in: names, out: []string{"o"},
			attrs: [][]byte{attrInt("num_heads", int64(c.Hq)), attrInt("kv_num_heads", int64(c.Hkv))}}},
		inputs: in,
		outs:   []tValue{{name: "o", dtype: Float32, dims: []any{"B", "T", c.Hq * c.D}}},
	}.encode()
}

// poolType is the element type of the case's pools.
func (c pagedCase) poolType() DType {
	switch {
	case c.int8:
		return Int8
	case c.f16:
		return Float16
	}
	return Float32
}

// pagedData is a case's random inputs.
type pagedData struct {
	q, k, v, kc, vc, ks, vs []float32
	kc8, vc8                []int8
	kc16, vc16              []Float16Bits
}

func newPagedData(c pagedCase, r *rand.Rand) pagedData {
	f := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = r.Float32()*2 - 1
		}
		return x
	}
	poolLen := c.Hkv * c.N * c.bs * c.D
	d := pagedData{q: f(c.B * c.T * c.Hq * c.D), k: f(c.B * c.T * c.Hkv * c.D), v: f(c.B * c.T * c.Hkv * c.D)}
	if c.f16 {
		// float16 pools, and the reference reads their exact values;
		// subnormal and high-exponent ones among them
		d.kc16, d.vc16 = make([]Float16Bits, poolLen), make([]Float16Bits, poolLen)
		d.kc, d.vc = make([]float32, poolLen), make([]float32, poolLen)
		for i, x := range f(2 * poolLen) {
			h := Float16FromFloat32(x)
			switch i % 97 {
			case 5:
				h = Float16Bits(0x0001 | uint16(h)&0x8000) // the smallest subnormal
			case 11:
				h = Float16Bits(0x03ff | uint16(h)&0x8000) // the largest subnormal
			case 17:
				h = Float16Bits(0x4bff | uint16(h)&0x8000) // 15.99: a high exponent, the scores still moderate
			}
			if i < poolLen {
				d.kc16[i], d.kc[i] = h, h.Float32()
			} else {
				d.vc16[i-poolLen], d.vc[i-poolLen] = h, h.Float32()
			}
		}
		return d
	}
	if !c.int8 {
		d.kc, d.vc = f(poolLen), f(poolLen)
		return d
	}
	d.ks, d.vs = f(c.Hkv*c.N), f(c.Hkv*c.N)
	for i := range d.ks { // as quantised pages hold them: |value| ≤ 127·scale ≈ 1
		d.ks[i], d.vs[i] = d.ks[i]/127, d.vs[i]/127
	}
	d.kc8, d.vc8 = make([]int8, poolLen), make([]int8, poolLen)
	d.kc, d.vc = make([]float32, poolLen), make([]float32, poolLen)
	for i := range poolLen {
		d.kc8[i], d.vc8[i] = int8(r.IntN(255)-127), int8(r.IntN(255)-127)
		blk := i / (c.bs * c.D) // (h·N + block)
		d.kc[i], d.vc[i] = float32(d.kc8[i])*d.ks[blk], float32(d.vc8[i])*d.vs[blk]
	}
	return d
}

// reference is the operator's contract in plain Go, in float64: token t of
// row b sees its cached slots j < ctx[b] and the step's tokens t' ≤ t.
func (c pagedCase) reference(d pagedData) []float32 {
	G, out := c.Hq/c.Hkv, make([]float32, c.B*c.T*c.Hq*c.D)
	scale := 1 / math.Sqrt(float64(c.D))
	for b := range c.B {
		for t := range c.T {
			for hq := range c.Hq {
				h := hq / G
				q := d.q[((b*c.T+t)*c.Hq+hq)*c.D:][:c.D]
				var keys, vals [][]float32
				for j := range int(c.ctx[b]) {
					off := ((h*c.N+int(c.table[b*c.M+j/c.bs]))*c.bs + j%c.bs) * c.D
					keys, vals = append(keys, d.kc[off:][:c.D]), append(vals, d.vc[off:][:c.D])
				}
				for tk := 0; tk <= t; tk++ {
					off := ((b*c.T+tk)*c.Hkv + h) * c.D
					keys, vals = append(keys, d.k[off:][:c.D]), append(vals, d.v[off:][:c.D])
				}
				s, mx := make([]float64, len(keys)), math.Inf(-1)
				for j, k := range keys {
					for i := range c.D {
						s[j] += float64(q[i]) * float64(k[i])
					}
					s[j] *= scale
					mx = max(mx, s[j])
				}
				sum := 0.0
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					sum += s[j]
				}
				o := out[((b*c.T+t)*c.Hq+hq)*c.D:][:c.D]
				for i := range c.D {
					acc := 0.0
					for j, v := range vals {
						acc += s[j] * float64(v[i])
					}
					o[i] = float32(acc / sum)
				}
			}
		}
	}
	return out
}

// run runs the operator on a case's data through a session.
// tensors copies the case's step inputs — q, k, v, bt, cl, and with pools
// also kc, vc (and ks, vs for int8) — into tensors closed when tb ends.
// k's width comes from d.k, so a test can give it a wrong one.
func (c pagedCase) tensors(tb testing.TB, d pagedData, pools bool) map[string]*Tensor {
	tb.Helper()
	add := func(x *Tensor, err error) *Tensor {
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { x.Close() })
		return x
	}
	B, T := int64(c.B), int64(c.T)
	in := map[string]*Tensor{
		"q":  add(CopyTensor([]int64{B, T, int64(c.Hq * c.D)}, d.q)),
		"k":  add(CopyTensor([]int64{B, T, int64(len(d.k) / (c.B * c.T))}, d.k)),
		"v":  add(CopyTensor([]int64{B, T, int64(c.Hkv * c.D)}, d.v)),
		"bt": add(CopyTensor([]int64{B, int64(c.M)}, c.table)),
		"cl": add(CopyTensor([]int64{B}, c.ctx)),
	}
	if !pools {
		return in
	}
	pool := []int64{int64(c.Hkv), int64(c.N), int64(c.bs), int64(c.D)}
	if c.f16 {
		in["kc"], in["vc"] = add(CopyTensor(pool, d.kc16)), add(CopyTensor(pool, d.vc16))
	} else if c.int8 {
		in["kc"], in["vc"] = add(CopyTensor(pool, d.kc8)), add(CopyTensor(pool, d.vc8))
		in["ks"] = add(CopyTensor([]int64{int64(c.Hkv), int64(c.N)}, d.ks))
		in["vs"] = add(CopyTensor([]int64{int64(c.Hkv), int64(c.N)}, d.vs))
	} else {
		in["kc"], in["vc"] = add(CopyTensor(pool, d.kc)), add(CopyTensor(pool, d.vc))
	}
	return in
}

// output is an empty tensor for the operator's output, closed when tb ends.
func (c pagedCase) output(tb testing.TB) *Tensor {
	tb.Helper()
	o, err := NewEmptyTensor(Float32, []int64{int64(c.B), int64(c.T), int64(c.Hq * c.D)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { o.Close() })
	return o
}

// run runs the operator on a case's data through a session.
func (c pagedCase) run(t *testing.T, s *Session, d pagedData) ([]float32, error) {
	t.Helper()
	out, err := s.Run(context.Background(), c.tensors(t, d, true))
	if err != nil {
		return nil, err
	}
	defer CloseAll(out)
	o, err := Data[float32](out["o"])
	return append([]float32(nil), o...), err
}

// TestPagedAttentionMatchesReference: the kernel against the plain-Go
// contract, for decode and prefill, ragged contexts, scattered and partly
// filled blocks, grouped heads, a head size that is not a multiple of the
// vector width, and int8 pools with per-block scales.
func TestPagedAttentionMatchesReference(t *testing.T) {
	needLib(t)
	cases := map[string]pagedCase{
		"decode ragged batch": raggedDecode,
		"prefill over a past": {B: 1, T: 11, Hq: 4, Hkv: 2, D: 20, N: 8, bs: 4, M: 3,
			ctx: []int64{10}, table: []int64{5, 1, 6}},
		"prefill, head size 64, pairs of heads": {B: 1, T: 9, Hq: 8, Hkv: 4, D: 64, N: 6, bs: 8, M: 3,
			ctx: []int64{13}, table: []int64{4, 0, 2}},
		"prefill, no past, MHA": {B: 2, T: 6, Hq: 2, Hkv: 2, D: 8, N: 2, bs: 4, M: 1,
			ctx: []int64{0, 0}, table: []int64{0, 1}},
		"int8 pools": {B: 2, T: 3, Hq: 6, Hkv: 2, D: 32, N: 10, bs: 8, M: 3, int8: true,
			ctx: []int64{21, 9}, table: []int64{4, 8, 1, 7, 0, 0}},
		"float16 pools, decode": {B: 3, T: 1, Hq: 12, Hkv: 4, D: 64, N: 16, bs: 16, M: 3, f16: true,
			ctx: []int64{40, 0, 7}, table: []int64{9, 3, 14, 0, 7, 2, 11, 6, 6}},
		"float16 pools, prefill over a past": {B: 1, T: 11, Hq: 4, Hkv: 2, D: 32, N: 8, bs: 4, M: 6, f16: true,
			ctx: []int64{10}, table: []int64{5, 1, 6, 0, 2, 3}},
		"float16 pools, head size 20 (the unwidened loops)": {B: 2, T: 3, Hq: 4, Hkv: 2, D: 20, N: 8, bs: 4, M: 4, f16: true,
			ctx: []int64{13, 2}, table: []int64{5, 1, 6, 7, 0, 2, 3, 4}},
	}
	ctx := context.Background()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := NewSession(ctx, pagedModel(c), Options{IntraOpThreads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			d := newPagedData(c, rand.New(rand.NewPCG(7, uint64(len(name)))))
			got, err := c.run(t, s, d)
			if err != nil {
				t.Fatal(err)
			}
			want := c.reference(d)
			worst := 0.0
			for i := range want {
				worst = max(worst, math.Abs(float64(got[i]-want[i])))
			}
			t.Logf("max |kernel − reference| = %.2g", worst)
			if worst > 1e-5 {
				t.Errorf("max |kernel − reference| = %g, want ≤ 1e-5", worst)
			}
		})
	}
}

// TestPagedAttentionUnavailable: where the operators could not be bound to
// the loaded library, a graph that uses them is refused before ONNX Runtime
// sees it, with what to do instead.
func TestPagedAttentionUnavailable(t *testing.T) {
	needLib(t)
	if err := Acquire(""); err != nil {
		t.Fatal(err)
	}
	defer Release()
	env.mu.Lock()
	saved := env.opsErr
	env.opsErr = fmt.Errorf("%w: (test) library too old", ErrCustomOps)
	env.mu.Unlock()
	defer func() {
		env.mu.Lock()
		env.opsErr = saved
		env.mu.Unlock()
	}()
	c := pagedCase{B: 1, T: 1, Hq: 2, Hkv: 1, D: 8, N: 4, bs: 4, M: 2}
	_, err := NewSession(context.Background(), pagedModel(c), Options{IntraOpThreads: 1})
	if !errors.Is(err, ErrCustomOps) || !strings.Contains(err.Error(), "--portable-attention") {
		t.Fatalf("err = %v, want ErrCustomOps naming --portable-attention", err)
	}
	s, err := NewSession(context.Background(), addModel(), Options{IntraOpThreads: 1})
	if err != nil {
		t.Fatalf("a model without the operators: %v", err)
	}
	s.Close()
}

// TestPagedAttentionBadInput: a block table or context length that would
// read outside the pool, and mis-shaped tensors, are refused with a message
// that names the input, never read — with the shapes read in place (C API
// 24) and through type-and-shape objects (older runtimes).
func TestPagedAttentionBadInput(t *testing.T) {
	needLib(t)
	defer setShapeInPlace(true)
	for _, inPlace := range []bool{true, false} {
		t.Run(map[bool]string{true: "shapes-in-place", false: "shape-objects"}[inPlace], func(t *testing.T) {
			setShapeInPlace(inPlace)
			pagedBadInput(t)
		})
	}
}

func pagedBadInput(t *testing.T) {
	base := pagedCase{B: 1, T: 1, Hq: 2, Hkv: 1, D: 8, N: 4, bs: 4, M: 2, ctx: []int64{6}, table: []int64{1, 3}}
	ctx := context.Background()
	s, err := NewSession(ctx, pagedModel(base), Options{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := newPagedData(base, rand.New(rand.NewPCG(1, 2)))
	if _, err := base.run(t, s, d); err != nil {
		t.Fatalf("valid input: %v", err)
	}
	for name, tc := range map[string]struct {
		mutate func(c *pagedCase, d *pagedData)
		want   string
	}{
		"block id past the pool": {func(c *pagedCase, d *pagedData) { c.table = []int64{1, 4} }, "block_tables[0][1] = 4 is outside the pool's 4 blocks"},
		"negative block id":      {func(c *pagedCase, d *pagedData) { c.table = []int64{-1, 3} }, "outside the pool"},
		"context beyond table":   {func(c *pagedCase, d *pagedData) { c.ctx = []int64{9} }, "context_lens[0] = 9, but block_tables holds 8 slots"},
		"negative context":       {func(c *pagedCase, d *pagedData) { c.ctx = []int64{-1} }, "context_lens[0] = -1"},
		"key of another width":   {func(c *pagedCase, d *pagedData) { d.k = append(d.k, d.k...) }, "key dimension 2 is 16, want 8"},
	} {
		t.Run(name, func(t *testing.T) {
			c, dd := base, d
			c.table, c.ctx = append([]int64(nil), base.table...), append([]int64(nil), base.ctx...)
			tc.mutate(&c, &dd)
			_, err := c.run(t, s, dd)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// BenchmarkPagedAttentionDecode times the kernel alone on one layer of a
// decode step, synthetic-110m's (12 query heads, 4 KV heads, head size
// 64) and synthetic-1b's (32 and 8, "-1b"): batch 8 at context 192 and
// batch 1 at contexts 128 and 2048, each row's blocks in order, with float
// pools, int8 pools (per-block scales) and float16 pools, on each variant
// with hand-written loops this CPU runs (avx2, avx512; the one picked at
// load is the engine's): the kernel's arithmetic and its hand-over to the
// thread pool more than the memory's speed (the pools stay in the
// last-level cache, but for float ones at 2048).
func BenchmarkPagedAttentionDecode(b *testing.B) {
	needLib(b)
	defer useAttentionVariant(attentionVariant())
	var variants []string
	for _, v := range attentionVariants() {
		if v != "generic" && !strings.HasSuffix(v, "-loops") {
			variants = append(variants, v)
		}
	}
	for _, pool := range []DType{Float32, Int8, Float16} {
		suffix := map[DType]string{Float32: "", Int8: "-int8", Float16: "-f16"}[pool]
		for _, shape := range []struct {
			name   string
			B, ctx int
			Hq     int
			Hkv    int
		}{{"b8-ctx192", 8, 192, 12, 4}, {"b1-ctx128", 1, 128, 12, 4}, {"b1-ctx2048", 1, 2048, 12, 4}, {"b1-ctx192-1b", 1, 192, 32, 8}, {"b1-ctx16", 1, 16, 12, 4}} {
			b.Run(shape.name+suffix, func(b *testing.B) {
				for _, v := range variants {
					b.Run(v, func(b *testing.B) {
						if err := useAttentionVariant(v); err != nil {
							b.Fatal(err)
						}
						benchPagedDecode(b, shape.B, shape.ctx, shape.Hq, shape.Hkv, pool)
					})
				}
			})
		}
	}
}

func benchPagedDecode(b *testing.B, B, ctxLen, Hq, Hkv int, pool DType) {
	needLib(b)
	M := ctxLen/16 + 1
	c := pagedCase{B: B, T: 1, Hq: Hq, Hkv: Hkv, D: 64, N: B * M, bs: 16, M: M, int8: pool == Int8, f16: pool == Float16}
	for i := range B {
		c.ctx = append(c.ctx, int64(ctxLen))
		for m := range M {
			c.table = append(c.table, int64(i*M+m))
		}
	}
	benchPagedCase(b, c)
}

// benchPagedCase times case c's attention node, two intra-op threads.
func benchPagedCase(b *testing.B, c pagedCase) {
	b.Helper()
	s, err := NewSession(context.Background(), pagedModel(c), Options{IntraOpThreads: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	d := newPagedData(c, rand.New(rand.NewPCG(1, 2)))
	in, out := c.tensors(b, d, true), map[string]*Tensor{"o": c.output(b)}
	runBound(b, s, in, out)
}

// BenchmarkPagedAttentionCold times a batch-1 decode step's attention node
// on synthetic-110m's shape, contexts 128 and 2048, with its pools out of
// the cache, as a decode step finds them (the step's weights stream
// through the cache between one layer's attention and the next step's),
// with and without the decode items' prefetch of their blocks, in
// alternated rounds (each side first in every other), one intra-op thread
// (a woken pool thread would time its wake-up). Between runs a 256 MiB
// buffer is read to push the pools
// out; a CPU whose last-level cache holds that buffer measures the warm
// case. Reports the medians and the per-round ratio (with ÷ without).
func BenchmarkPagedAttentionCold(b *testing.B) {
	needLib(b)
	evict := make([]uint64, 256<<20/8)
	for i := range evict { // written, so that it is memory and not the zero page
		evict[i] = uint64(i)
	}
	var sink uint64 // the eviction reads' sum, logged so that they are not dropped
	defer func() { b.Logf("eviction sum %d", sink) }()
	defer setAttentionPrefetch(true)
	for _, ctxLen := range []int{128, 2048} {
		b.Run(fmt.Sprintf("ctx%d", ctxLen), func(b *testing.B) {
			const runs, rounds = 100, 7
			M := ctxLen/16 + 1
			c := pagedCase{B: 1, T: 1, Hq: 12, Hkv: 4, D: 64, N: M, bs: 16, M: M, ctx: []int64{int64(ctxLen)}}
			for m := range M {
				c.table = append(c.table, int64(m))
			}
			s, err := NewSession(context.Background(), pagedModel(c), Options{IntraOpThreads: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			d := newPagedData(c, rand.New(rand.NewPCG(1, 2)))
			bind, err := s.Bind(c.tensors(b, d, true), map[string]*Tensor{"o": c.output(b)})
			if err != nil {
				b.Fatal(err)
			}
			timed := func(prefetch bool) float64 {
				setAttentionPrefetch(prefetch)
				var total time.Duration
				for range runs {
					for i := 0; i < len(evict); i += 8 {
						sink += evict[i]
					}
					start := time.Now()
					if err := bind.Run(context.Background()); err != nil {
						b.Fatal(err)
					}
					total += time.Since(start)
				}
				return float64(total.Nanoseconds()) / 1e3 / runs
			}
			for b.Loop() {
				var with, without, ratios []float64
				for r := range rounds {
					var w, o float64
					if r%2 == 0 { // each side first in every other round
						w, o = timed(true), timed(false)
					} else {
						o, w = timed(false), timed(true)
					}
					with, without, ratios = append(with, w), append(without, o), append(ratios, w/o)
				}
				b.Logf("cold pools, b1 context %d: with prefetch %.1f µs, without %.1f µs (medians of %d rounds of %d); with ÷ without %.3f (rounds %.3f)",
					ctxLen, median(with), median(without), rounds, runs, median(ratios), ratios)
				b.ReportMetric(median(with), "with-µs")
				b.ReportMetric(median(without), "without-µs")
				b.ReportMetric(median(ratios), "with/without")
			}
		})
	}
}

// BenchmarkPagedAttentionLayout times twelve kernel nodes — a batch-8
// decode step's attention on synthetic-110m, each layer over its own pools
// (a kvcache.Cache's, in huge pages as the engine's are), 160 MB in all,
// beyond the last-level cache — with each row's blocks in order, taken in
// turn by the rows (row i's block m is m·8+i: eight sequences that grew
// together a block at a time from the lowest free block), and scattered at
// random over pools four times the needed size. The kernel reads blocks
// where they lie, so a serving cache's layout shows here: in order is the
// fastest, taken in turn slower, scattered slowest, with huge pages and
// with 4 KiB ones; software prefetch of the next block, or of the next two
// or four, narrowed neither gap. kvcache's block placement (allocBlock)
// follows from it.
func BenchmarkPagedAttentionLayout(b *testing.B) {
	for _, layout := range []string{"in-order", "interleaved", "random"} {
		b.Run(layout, func(b *testing.B) { benchPagedLayout(b, layout) })
	}
}

func benchPagedLayout(b *testing.B, layout string) {
	needLib(b)
	const L = 12
	B, ctxLen := 8, 192
	M := ctxLen/16 + 1
	spread := 4
	c := pagedCase{B: B, T: 1, Hq: 12, Hkv: 4, D: 64, N: B * M * spread, bs: 16, M: M}
	r := rand.New(rand.NewPCG(5, 5))
	perm := r.Perm(c.N)
	for i := range B {
		c.ctx = append(c.ctx, int64(ctxLen))
		for m := range M {
			id := i*M + m
			switch layout {
			case "interleaved":
				id = m*B + i
			case "random":
				id = perm[i*M+m]
			}
			c.table = append(c.table, int64(id))
		}
	}
	// L nodes, each over its own pools
	var nodes []tNode
	in := []tValue{
		{name: "q", dtype: Float32, dims: []any{"B", "T", c.Hq * c.D}},
		{name: "k", dtype: Float32, dims: []any{"B", "T", "Wk"}},
		{name: "v", dtype: Float32, dims: []any{"B", "T", "Wv"}},
		{name: "bt", dtype: Int64, dims: []any{"B", "M"}},
		{name: "cl", dtype: Int64, dims: []any{"B"}},
	}
	var outs []tValue
	for l := range L {
		s := strconv.Itoa(l)
		in = append(in, tValue{name: "kc" + s, dtype: Float32, dims: []any{c.Hkv, "N", c.bs, c.D}},
			tValue{name: "vc" + s, dtype: Float32, dims: []any{c.Hkv, "N", c.bs, c.D}})
		nodes = append(nodes, tNode{op: "PagedAttention", domain: OpDomain, in: []string{"q", "k", "v", "kc" + s, "vc" + s, "bt", "cl"}, out: []string{"o" + s},
			attrs: [][]byte{attrInt("num_heads", int64(c.Hq)), attrInt("kv_num_heads", int64(c.Hkv))}})
		outs = append(outs, tValue{name: "o" + s, dtype: Float32, dims: []any{"B", "T", c.Hq * c.D}})
	}
	model := tModel{opsets: map[string]int64{"": 17, OpDomain: 1}, nodes: nodes, inputs: in, outs: outs}.encode()
	s, err := NewSession(context.Background(), model, Options{IntraOpThreads: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// The pools are a kvcache.Cache's: one mapping, huge pages advised,
	// laid out as the engine's are.
	cfg := kvcache.Config{Layers: L, KVHeads: c.Hkv, HeadDim: c.D, BlockSize: c.bs, Options: kvcache.Options{DisablePrefixCache: true}}
	cfg.BudgetBytes = int64(c.N) * cfg.BlockBytes()
	cache, err := kvcache.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer cache.Close()
	d := newPagedData(c, r)
	tin, tout := c.tensors(b, d, false), map[string]*Tensor{}
	for l := range L {
		s := strconv.Itoa(l)
		for _, p := range []struct {
			name       string
			pool, data []float32
		}{{"kc", cache.KeyPool(l), d.kc}, {"vc", cache.ValuePool(l), d.vc}} {
			copy(p.pool, p.data)
			t, err := NewTensor(cache.PoolShape(), p.pool)
			if err != nil {
				b.Fatal(err)
			}
			defer t.Close()
			tin[p.name+s] = t
		}
		tout["o"+s] = c.output(b)
	}
	runBound(b, s, tin, tout)
}

// runBound binds in and out to s once and runs it b.N times.
func runBound(b *testing.B, s *Session, in, out map[string]*Tensor) {
	b.Helper()
	bind, err := s.Bind(in, out)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := bind.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// fusedInputs is a random stacked q/k/v projection [B, T, width] for the
// fused form, and each token's position (its row's context length on).
func (c pagedCase) fusedInputs(r *rand.Rand) (qkv []float32, pos []int64, width int) {
	width = (c.Hq + 2*c.Hkv) * c.D
	qkv = make([]float32, c.B*c.T*width)
	for i := range qkv {
		qkv[i] = r.Float32()*2 - 1
	}
	pos = make([]int64, c.B*c.T)
	for b := range c.B {
		for t := range c.T {
			pos[b*c.T+t] = c.ctx[b] + int64(t)
		}
	}
	return qkv, pos, width
}

// TestPagedAttentionFused: the fused form (the stacked projection and the
// rotary inputs in, new_keys and new_values out) gives exactly what
// RotaryQKV feeding the plain form gives, for decode and prefill, float and
// int8 pools; it refuses a position outside the caches, and either form
// refuses the other's outputs.
func TestPagedAttentionFused(t *testing.T) {
	needLib(t)
	cases := map[string]pagedCase{
		"decode ragged batch": raggedDecode,
		"prefill over a past, 24 tokens": {B: 1, T: 24, Hq: 4, Hkv: 2, D: 20, N: 16, bs: 4, M: 9,
			ctx: []int64{10}, table: []int64{5, 1, 6, 2, 3, 4, 7, 8, 9}},
		"int8 pools": {B: 2, T: 3, Hq: 6, Hkv: 2, D: 32, N: 10, bs: 8, M: 3, int8: true,
			ctx: []int64{21, 9}, table: []int64{4, 8, 1, 7, 0, 0}},
	}
	const P = 64
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(9, uint64(len(name))))
			d := newPagedData(c, r)
			qkv, pos, width := c.fusedInputs(r)
			cos, sin := rotaryTables(P, c.D)
			pool := c.poolType()
			inputs := []tValue{
				{name: "qkv", dtype: Float32, dims: []any{"B", "T", width}}, {name: "pos", dtype: Int64, dims: []any{"B", "T"}},
				{name: "kc", dtype: pool, dims: []any{c.Hkv, "N", c.bs, c.D}}, {name: "vc", dtype: pool, dims: []any{c.Hkv, "N", c.bs, c.D}},
				{name: "bt", dtype: Int64, dims: []any{"B", "M"}}, {name: "cl", dtype: Int64, dims: []any{"B"}},
			}
			scales := []string{"", ""}
			if c.int8 {
				inputs = append(inputs, tValue{name: "ks", dtype: Float32, dims: []any{c.Hkv, "N"}}, tValue{name: "vs", dtype: Float32, dims: []any{c.Hkv, "N"}})
				scales = []string{"ks", "vs"}
			}
			heads := [][]byte{attrInt("num_heads", int64(c.Hq)), attrInt("kv_num_heads", int64(c.Hkv))}
			plainIn := append([]string{"q", "k", "v", "kc", "vc", "bt", "cl"}, scales...)
			fusedIn := append(append([]string{"qkv", "", "", "kc", "vc", "bt", "cl"}, scales...), "pos", "cos", "sin")
			if !c.int8 {
				plainIn = plainIn[:7]
			}
			kvDims := []any{"B", c.Hkv, "T", c.D}
			m := tModel{
				opsets: map[string]int64{"": 17, OpDomain: 1},
				inputs: inputs,
				inits:  []tInit{{name: "cos", dims: []int64{P, int64(c.D / 2)}, f32: cos}, {name: "sin", dims: []int64{P, int64(c.D / 2)}, f32: sin}},
				nodes: []tNode{
					{op: "RotaryQKV", domain: OpDomain, in: []string{"qkv", "pos", "cos", "sin"}, out: []string{"q", "k", "v", "kh", "vh"}, attrs: heads},
					{op: "PagedAttention", domain: OpDomain, in: plainIn, out: []string{"o"}, attrs: heads},
					{op: "PagedAttention", domain: OpDomain, in: fusedIn, out: []string{"fo", "fkh", "fvh"}, attrs: heads},
				},
				outs: []tValue{{name: "o", dtype: Float32, dims: []any{"B", "T", c.Hq * c.D}}, {name: "fo", dtype: Float32, dims: []any{"B", "T", c.Hq * c.D}},
					{name: "kh", dtype: Float32, dims: kvDims}, {name: "vh", dtype: Float32, dims: kvDims},
					{name: "fkh", dtype: Float32, dims: kvDims}, {name: "fvh", dtype: Float32, dims: kvDims}},
			}
			s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			in := c.tensors(t, d, true)
			delete(in, "q")
			delete(in, "k")
			delete(in, "v")
			in["qkv"] = mustCopy(t, []int64{int64(c.B), int64(c.T), int64(width)}, qkv)
			in["pos"] = mustCopy(t, []int64{int64(c.B), int64(c.T)}, pos)
			out, err := s.Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			defer CloseAll(out)
			for _, pair := range [][2]string{{"o", "fo"}, {"kh", "fkh"}, {"vh", "fvh"}} {
				a, err := Data[float32](out[pair[0]])
				if err != nil {
					t.Fatal(err)
				}
				f, err := Data[float32](out[pair[1]])
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(a, f); d != 0 || len(a) != len(f) || len(a) == 0 {
					t.Errorf("fused %s differs from RotaryQKV + PagedAttention's %s by %g (%d against %d values)", pair[1], pair[0], d, len(f), len(a))
				}
			}
			bad := append([]int64(nil), pos...)
			bad[len(bad)-1] = P
			in["pos"] = mustCopy(t, []int64{int64(c.B), int64(c.T)}, bad)
			_, err = s.Run(context.Background(), in)
			if err == nil || !strings.Contains(err.Error(), "outside the rotary caches") {
				t.Errorf("a position past the caches: err = %v, want one naming it", err)
			}
		})
	}
	t.Run("outputs of the other form", func(t *testing.T) {
		c := pagedCase{B: 1, T: 1, Hq: 2, Hkv: 1, D: 8, N: 4, bs: 4, M: 2, ctx: []int64{3}, table: []int64{0, 1}}
		m := tModel{
			opsets: map[string]int64{"": 17, OpDomain: 1},
			inputs: []tValue{{name: "q", dtype: Float32, dims: []any{1, 1, 16}}, {name: "k", dtype: Float32, dims: []any{1, 1, 8}},
				{name: "v", dtype: Float32, dims: []any{1, 1, 8}}, {name: "kc", dtype: Float32, dims: []any{1, 4, 4, 8}},
				{name: "vc", dtype: Float32, dims: []any{1, 4, 4, 8}}, {name: "bt", dtype: Int64, dims: []any{1, 2}}, {name: "cl", dtype: Int64, dims: []any{1}}},
			nodes: []tNode{{op: "PagedAttention", domain: OpDomain, in: []string{"q", "k", "v", "kc", "vc", "bt", "cl"}, out: []string{"o", "nk", "nv"},
				attrs: [][]byte{attrInt("num_heads", 2), attrInt("kv_num_heads", 1)}}},
			outs: []tValue{{name: "o", dtype: Float32, dims: []any{1, 1, 16}}, {name: "nk", dtype: Float32, dims: []any{1, 1, 1, 8}}, {name: "nv", dtype: Float32, dims: []any{1, 1, 1, 8}}},
		}
		s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = s.Run(context.Background(), c.tensors(t, newPagedData(c, rand.New(rand.NewPCG(1, 1))), true))
		if err == nil || !strings.Contains(err.Error(), "the plain form, and any form with slots") {
			t.Errorf("the plain form with three outputs: err = %v, want one saying which form has them", err)
		}
	})
}

// BenchmarkNodeInputs times a decode step's attention node of
// synthetic-110m (batch 1, context 16: its arithmetic a few µs, its seven
// inputs' reads a visible part of the rest) with the kernels reading their
// inputs' shapes in place (C API 24) and through a type-and-shape object
// (before 1.24), in alternated rounds of 2,000 runs, and reports the
// medians and the saving per run.
func BenchmarkNodeInputs(b *testing.B) {
	needLib(b)
	defer setShapeInPlace(true)
	const runs, rounds = 2000, 9
	c := pagedCase{B: 1, T: 1, Hq: 12, Hkv: 4, D: 64, N: 2, bs: 16, M: 2, f16: true, ctx: []int64{16}, table: []int64{0, 1}}
	s, err := NewSession(context.Background(), pagedModel(c), Options{IntraOpThreads: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	bind, err := s.Bind(c.tensors(b, newPagedData(c, rand.New(rand.NewPCG(1, 2))), true), map[string]*Tensor{"o": c.output(b)})
	if err != nil {
		b.Fatal(err)
	}
	timed := func(inPlace bool) float64 {
		setShapeInPlace(inPlace)
		start := time.Now()
		for range runs {
			if err := bind.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / 1e3 / runs
	}
	for b.Loop() {
		var in, out []float64
		for r := range rounds {
			if r%2 == 0 {
				in, out = append(in, timed(true)), append(out, timed(false))
			} else {
				out, in = append(out, timed(false)), append(in, timed(true))
			}
		}
		b.Logf("attention node, b1 context 16: %.2f µs a run with shapes read in place, %.2f through type-and-shape objects (medians of %d rounds of %d)",
			median(in), median(out), rounds, runs)
		b.ReportMetric(median(in), "in-place-µs")
		b.ReportMetric(median(out), "object-µs")
		b.ReportMetric(median(out)-median(in), "saved-µs")
	}
}

// BenchmarkPagedAttentionPrefill times a 64-token prefill chunk's
// attention node after 128 cached tokens (synthetic-110m's heads, float32
// pools) on every variant this CPU runs, the compiled loops ("generic",
// "-loops") included, whose code shifts with how the shared prefill driver
// calls its loops (attention_loops.h's attend_prefill).
func BenchmarkPagedAttentionPrefill(b *testing.B) {
	needLib(b)
	defer useAttentionVariant(attentionVariant())
	const T, ctxLen = 64, 128
	M := (ctxLen+T)/16 + 1
	c := pagedCase{B: 1, T: T, Hq: 12, Hkv: 4, D: 64, N: M, bs: 16, M: M, ctx: []int64{ctxLen}}
	for m := range M {
		c.table = append(c.table, int64(m))
	}
	for _, v := range attentionVariants() {
		b.Run(v, func(b *testing.B) {
			if err := useAttentionVariant(v); err != nil {
				b.Fatal(err)
			}
			benchPagedCase(b, c)
		})
	}
}
