package ort

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/vec"
)

// q4Case is one int4 or int8 product: M rows of a [M, K] against N weight
// rows in MatMulNBits' layout (bits 4 or 8, block 32, symmetric).
type q4Case struct {
	M, N, K, bits int
	a             []float32
	b             []uint8   // [N, nb, 32·bits/8]
	scales        []float32 // [N, nb]
}

func (c *q4Case) nb() int { return (c.K + 31) / 32 }

func newQ4Case(M, N, K int, r *rand.Rand) *q4Case { return newNBitsCase(4, M, N, K, r) }

// newNBitsCase draws codes over their whole range (int8's include −128).
func newNBitsCase(bits, M, N, K int, r *rand.Rand) *q4Case {
	c := &q4Case{M: M, N: N, K: K, bits: bits}
	nb := c.nb()
	c.a = make([]float32, M*K)
	for i := range c.a {
		c.a[i] = float32(r.NormFloat64())
	}
	c.b = make([]uint8, N*nb*32*bits/8)
	c.scales = make([]float32, N*nb)
	for n := range N {
		for k := range nb * 32 {
			code, zero := uint8(r.IntN(1<<bits)), uint8(1<<(bits-1))
			if k >= K {
				code = zero // the padding of a last partial block: zero, as quant writes it
			}
			if bits == 8 {
				c.b[n*nb*32+k] = code
				continue
			}
			i := (n*nb*32 + k) / 2
			if k%2 == 0 {
				c.b[i] |= code
			} else {
				c.b[i] |= code << 4
			}
		}
		for blk := range nb {
			c.scales[n*nb+blk] = (0.5 + r.Float32()) / 64
		}
	}
	return c
}

// f16Scales gives c scales that are float16 numbers exactly (k/4096 for k
// in 1..64), which the kernel packs as float16.
func f16Scales(c *q4Case, r *rand.Rand) {
	for i := range c.scales {
		c.scales[i] = float32(1+r.IntN(64)) / 4096
	}
}

// weight is element (n, k) of B dequantised.
func (c *q4Case) weight(n, k int) float64 {
	nb := c.nb()
	if c.bits == 8 {
		return float64(int(c.b[n*nb*32+k])-128) * float64(c.scales[n*nb+k/32])
	}
	v := c.b[(n*nb*32+k)/2]
	if k%2 == 1 {
		v >>= 4
	}
	return float64(int(v&15)-8) * float64(c.scales[n*nb+k/32])
}

// reference is the product in float64, plain (exact) and with a quantised
// to int8 per block of 32 as the kernel does (rounding half away from zero);
// bound is, per output, how far the quantised product may lie from the
// exact one: Σ_blk (amax_blk/254)·Σ_k |w|, half a step per activation.
func (c *q4Case) reference() (exact, quantised, bound, magnitude []float64) {
	nb := c.nb()
	exact, quantised = make([]float64, c.M*c.N), make([]float64, c.M*c.N)
	bound, magnitude = make([]float64, c.M*c.N), make([]float64, c.M*c.N)
	qa := make([]float64, nb*32)
	amax := make([]float64, nb)
	for m := range c.M {
		row := c.a[m*c.K : (m+1)*c.K]
		clear(qa)
		for blk := range nb {
			amax[blk] = 0
			for k := blk * 32; k < min(c.K, blk*32+32); k++ {
				amax[blk] = max(amax[blk], math.Abs(float64(row[k])))
			}
			d := float32(amax[blk] / 127)
			if d == 0 {
				continue
			}
			id := 1 / d
			for k := blk * 32; k < min(c.K, blk*32+32); k++ {
				v := row[k] * id
				q := math.Trunc(float64(v) + math.Copysign(0.5, float64(v)))
				qa[k] = max(-127, min(127, q)) * float64(d)
			}
		}
		for n := range c.N {
			var e, q, bd, mag float64
			for k := range c.K {
				w := c.weight(n, k)
				e += float64(row[k]) * w
				q += qa[k] * w
				mag += math.Abs(float64(row[k]) * w)
				bd += amax[k/32] / 254 * math.Abs(w)
			}
			i := m*c.N + n
			exact[i], quantised[i], bound[i], magnitude[i] = e, q, bd, mag
		}
	}
	return exact, quantised, bound, magnitude
}

// q4Model is a graph of the case's weights under three nodes with the same
// inputs: ai.edgeinfer.MatMulNBits (y), and com.microsoft.MatMulNBits with
// accuracy_level 4 (y4, int8 activations, as ours) and 0 (y0, fp32).
func q4Model(c *q4Case, ops ...string) []byte {
	nb := int64(c.nb())
	attrs := func(acc int64) [][]byte {
		a := [][]byte{attrInt("K", int64(c.K)), attrInt("N", int64(c.N)), attrInt("bits", int64(c.bits)), attrInt("block_size", 32)}
		if acc > 0 {
			a = append(a, attrInt("accuracy_level", acc))
		}
		return a
	}
	in := []string{"a", "b", "scales"}
	all := map[string]tNode{
		"y":  {op: "MatMulNBits", domain: OpDomain, in: in, out: []string{"y"}, attrs: attrs(0)},
		"y4": {op: "MatMulNBits", domain: "com.microsoft", in: in, out: []string{"y4"}, attrs: attrs(4)},
		"y0": {op: "MatMulNBits", domain: "com.microsoft", in: in, out: []string{"y0"}, attrs: attrs(0)},
	}
	if len(ops) == 0 {
		ops = []string{"y", "y4", "y0"}
	}
	m := tModel{
		opsets: map[string]int64{"": 17, OpDomain: 1, "com.microsoft": 1},
		inputs: []tValue{{name: "a", dtype: Float32, dims: []any{"M", c.K}}},
		inits: []tInit{{name: "b", dims: []int64{int64(c.N), nb, int64(4 * c.bits)}, u8: c.b},
			{name: "scales", dims: []int64{int64(c.N) * nb}, f32: c.scales}},
	}
	for _, o := range ops {
		m.nodes = append(m.nodes, all[o])
		m.outs = append(m.outs, tValue{name: o, dtype: Float32, dims: []any{"M", c.N}})
	}
	return m.encode()
}

func (c *q4Case) run(t testing.TB, s *Session) map[string][]float32 {
	t.Helper()
	a := mustCopy(t, []int64{int64(c.M), int64(c.K)}, c.a)
	defer a.Close()
	return runOutputs(t, s, map[string]*Tensor{"a": a})
}

// runOutputs runs s on feeds and copies out every float output.
func runOutputs(t testing.TB, s *Session, feeds map[string]*Tensor) map[string][]float32 {
	t.Helper()
	out, err := s.Run(context.Background(), feeds)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseAll(out)
	got := map[string][]float32{}
	for name, x := range out {
		d, err := Data[float32](x)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = append([]float32(nil), d...)
	}
	return got
}

// TestQ4Plan: a decode step's product (M ≤ 8) on a pool of 2..16 threads
// is one batch a thread, split by regions into pieces that cover every
// item, pieces of at most ~32 KiB of weights unless one item is larger; a
// prefill chunk (M > 8), an unknown pool (0 or 1 threads), a larger pool
// or a product with fewer pieces than threads keeps 16 batches in order
// (or one an item, fewer than 16). On every variant: their tiles take 4,
// 6 (a prefill chunk's on the 256-bit int4 tiles) or 8 rows.
func TestQ4Plan(t *testing.T) {
	forEachVariant(t, "int4 matmul", q4Compiled(), q4Variants(), q4Variant(), useQ4Variant, func(t *testing.T, v string) { testQ4Plan(t) })
}

func testQ4Plan(t *testing.T) {
	for _, c := range []struct{ M, N, K, threads int }{
		{1, 2048, 2048, 2}, {1, 768, 768, 2}, {8, 2048, 8192, 2}, {1, 32000, 2048, 3}, {1, 256, 32768, 2},
		{1, 2048, 2048, 16}, {1, 2048, 2048, 17}, {1, 2048, 2048, 1}, {1, 2048, 2048, 0}, {9, 2048, 2048, 2},
		{1, 16, 64, 2},
	} {
		batches, regions, pieces, piece, items, chunk, rowTiles := q4Plan(c.M, c.N, c.K, c.threads)
		groups := (c.N + 7) / 8
		groupBytes := 8 * (c.K + 31) / 32 * (16 + 2) // 8 rows of 16-byte blocks and float16 scales
		itemBytes := chunk * groupBytes
		if items != rowTiles*((groups+chunk-1)/chunk) {
			t.Fatalf("%+v: %d items of %d groups in %d row tiles, want every group in each", c, items, chunk, rowTiles)
		}
		decode := c.M <= 8 && c.threads >= 2 && c.threads <= 16
		switch {
		case decode && regions > 0:
			if regions != c.threads || batches != c.threads || pieces < c.threads || piece < 1 ||
				(piece-1)*itemBytes >= 32768 || pieces != (items+piece-1)/piece {
				t.Fatalf("%+v: %d batches, %d regions, %d pieces of %d items (%d items, %d B each): want one region a thread "+
					"covering the items in pieces of at most 32 KiB", c, batches, regions, pieces, piece, items, itemBytes)
			}
		case decode && groups*groupBytes*rowTiles >= 2*c.threads*32768:
			t.Fatalf("%+v: %d batches, no regions, for a product of %d KiB", c, batches, groups*groupBytes*rowTiles/1024)
		default:
			if regions != 0 || batches != min(16, items) {
				t.Fatalf("%+v: %d batches, %d regions: want min(16, %d items) in order", c, batches, regions, items)
			}
		}
	}
}

// TestQ4RegionsAgree: a decode step's product split by regions on two
// threads (every run after a node's first, ei_q4_plan) writes the same
// bits as on one thread, run after run on new activations, whichever
// thread takes which region and however many pieces one takes from the
// other's back: each output is one item's, whoever runs it.
func TestQ4RegionsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, sh := range []struct{ bits, M, N, K int }{{4, 1, 4096, 512}, {8, 1, 1000, 2080}, {4, 3, 2048, 1024}, {4, 8, 4104, 256}} {
		c := newNBitsCase(sh.bits, sh.M, sh.N, sh.K, r)
		if _, regions, _, _, _, _, _ := q4Plan(sh.M, sh.N, sh.K, 2); regions != 2 {
			t.Fatalf("%+v: not split by regions on two threads", sh)
		}
		var sessions [2]*Session
		for i := range sessions {
			s, err := NewSession(context.Background(), q4Model(c), Options{IntraOpThreads: i + 1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			sessions[i] = s
		}
		for run := range 20 {
			for i := range c.a {
				c.a[i] = float32(r.NormFloat64())
			}
			want, got := c.run(t, sessions[0]), c.run(t, sessions[1])
			for i, y := range got["y"] {
				if math.Float32bits(y) != math.Float32bits(want["y"][i]) {
					t.Fatalf("%+v, run %d: y[%d] = %g on two threads, %g on one", sh, run, i, y, want["y"][i])
				}
			}
		}
	}
}

// TestQ4Stolen: a product whose pieces of two regions are all taken from
// their backs by the third region's thread (q4Stolen: one thread, region
// 2 first) writes the same bits as a one-thread session, and finds each
// row's largest output where pkg/vec's Argmax does, the first of equals,
// with a tie planted between region 0 or 1 — the first or the last run
// that thread took from the others — and region 2.
func TestQ4Stolen(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 17))
	for _, sh := range []struct {
		bits, M, N, K int
		tieIn         int // the region of the tie's first column: 0 or 1
	}{{4, 1, 4096, 512, 0}, {8, 1, 1000, 2080, 0}, {4, 3, 2048, 1024, 0}, {4, 8, 4104, 256, 0},
		{4, 1, 4096, 512, 1}, {8, 1, 1000, 2080, 1}} {
		c := newNBitsCase(sh.bits, sh.M, sh.N, sh.K, r)
		t0, t1 := sh.N/4+3, 3*sh.N/4+1 // in regions 0 and 2 of three
		if sh.tieIn == 1 {
			t0 = sh.N/2 + 3
		}
		plantTie(c, t0, t1)
		y, best, ok := q4Stolen(sh.bits, sh.M, sh.N, sh.K, c.a, c.b, c.scales)
		if !ok {
			t.Fatalf("%+v: not split by regions on three threads", sh)
		}
		s, err := NewSession(context.Background(), q4Model(c), Options{IntraOpThreads: 1})
		if err != nil {
			t.Fatal(err)
		}
		want := c.run(t, s)["y"]
		s.Close()
		for i := range want {
			if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: y[%d] = %g with regions 0 and 1 stolen, %g on one thread", sh, i, y[i], want[i])
			}
		}
		for m := range sh.M {
			row := want[m*sh.N : (m+1)*sh.N]
			if row[t0] != row[t1] || vec.Argmax(row) != t0 {
				t.Fatalf("%+v: row %d: no tie at its largest output (%g at %d, %g at %d, largest at %d)", sh, m, row[t0], t0, row[t1], t1, vec.Argmax(row))
			}
			if best[m] != int64(t0) {
				t.Fatalf("%+v: row %d's best %d with regions 0 and 1 stolen, want %d (%g)", sh, m, best[m], t0, row[t0])
			}
		}
	}
}

// plantTie makes every row of c's a alike and weight rows t0 and t1 its
// signs at the largest codes, with scales 1: each row's largest output
// is the tie y[t0] = y[t1] = the largest codes' Σ|a|.
func plantTie(c *q4Case, t0, t1 int) {
	for m := 1; m < c.M; m++ {
		copy(c.a[m*c.K:(m+1)*c.K], c.a[:c.K])
	}
	nb, rowBytes := c.nb(), len(c.b)/c.N
	top, zero := 1<<(c.bits-1)-1, 1<<(c.bits-1)
	w := c.b[t0*rowBytes : (t0+1)*rowBytes]
	for k := range c.K {
		code := zero - top
		if c.a[k] > 0 {
			code = zero + top
		}
		if c.bits == 8 {
			w[k] = uint8(code)
		} else {
			w[k/2] = w[k/2]&(0xF0>>(4*(k%2))) | uint8(code)<<(4*(k%2))
		}
	}
	for blk := range nb {
		c.scales[t0*nb+blk] = 1
	}
	copy(c.b[t1*rowBytes:(t1+1)*rowBytes], w)
	copy(c.scales[t1*nb:(t1+1)*nb], c.scales[t0*nb:(t0+1)*nb])
}

// TestKernelMatMulQ4Variants: each int4 variant against the float64
// references and ONNX Runtime's own MatMulNBits on the same weights, and
// against the first variant: decode rows and prefill tiles (M not a
// multiple of the 4-row tile), K not a multiple of 32 or of 256, N not a
// multiple of a work item's columns.
//
// Bounds: against the reference that quantises a as the kernel does,
// float32 rounding (1e-5 of Σ|a·w|); against the exact product, half a
// quantisation step per activation (bound, computed per output) — and
// MatMulNBits at accuracy_level 4, which also quantises a per block of 32,
// must meet the same bound, so the two agree within twice it.
//
// Both weight widths run on every shape, with scales that are float16
// numbers and scales that are not: int4 and int8, and the float16 and
// float32 packing of the scales, take different code paths in each variant.
func TestKernelMatMulQ4Variants(t *testing.T) {
	needLib(t)
	type shape struct {
		bits, M, N, K int
		f16           bool
	}
	var shapes []shape
	for _, bits := range []int{4, 8} {
		for _, f16 := range []bool{false, true} {
			for _, sh := range []shape{{M: 1, N: 2048, K: 768}, {M: 1, N: 33, K: 100}, {M: 1, N: 19, K: 448}, {M: 1, N: 7, K: 992},
				{M: 3, N: 40, K: 288}, {M: 4, N: 17, K: 32}, {M: 7, N: 70, K: 1000}, {M: 8, N: 24, K: 64}, {M: 9, N: 5, K: 31},
				{M: 11, N: 40, K: 96}, {M: 12, N: 24, K: 64}, {M: 13, N: 40, K: 96}, {M: 64, N: 96, K: 544}} {
				sh.bits, sh.f16 = bits, f16
				shapes = append(shapes, sh)
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 5))
	type prepared struct {
		c                                  *q4Case
		s                                  *Session
		exact, quantised, bound, magnitude []float64
		first                              []float32
	}
	var all []*prepared
	for _, sh := range shapes {
		c := newNBitsCase(sh.bits, sh.M, sh.N, sh.K, r)
		if sh.f16 {
			f16Scales(c, r)
		}
		s, err := NewSession(context.Background(), q4Model(c), Options{IntraOpThreads: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		p := &prepared{c: c, s: s}
		p.exact, p.quantised, p.bound, p.magnitude = c.reference()
		all = append(all, p)
	}
	forEachVariant(t, "int4 matmul", q4Compiled(), q4Variants(), q4Variant(), useQ4Variant, func(t *testing.T, v string) {
		var worstQ, worstFirst, worstBound, worstMS, worstMS0 float64 // as fractions of their allowance
		for _, p := range all {
			got := p.c.run(t, p.s)
			if p.first == nil {
				p.first = got["y"]
			}
			for i, y := range got["y"] {
				tol := 1e-5*p.magnitude[i] + 1e-6
				worstQ = max(worstQ, math.Abs(float64(y)-p.quantised[i])/tol)
				worstFirst = max(worstFirst, math.Abs(float64(y)-float64(p.first[i]))/tol)
				worstBound = max(worstBound, math.Abs(float64(y)-p.exact[i])/(p.bound[i]+tol))
				worstMS = max(worstMS, math.Abs(float64(y)-float64(got["y4"][i]))/(2*p.bound[i]+tol))
				worstMS0 = max(worstMS0, math.Abs(float64(y)-float64(got["y0"][i]))/(p.bound[i]+2*tol))
			}
		}
		t.Logf("%s (int4 and int8), worst as a share of the allowance: vs quantised reference %.3f, vs first variant %.3f, "+
			"vs exact %.3f, vs MatMulNBits acc4 %.3f, vs MatMulNBits fp32 %.3f", v, worstQ, worstFirst, worstBound, worstMS, worstMS0)
		for what, w := range map[string]float64{"the quantised reference": worstQ, "the first variant": worstFirst,
			"the exact product": worstBound, "MatMulNBits accuracy_level 4": worstMS, "MatMulNBits fp32": worstMS0} {
			if w > 1 {
				t.Errorf("%s: off %s by %.2f times the allowance", v, what, w)
			}
		}
	})
}

// TestKernelMatMulQ4Refuses: what the kernel does not run is refused with
// what to use instead, when the session loads or the node runs.
func TestKernelMatMulQ4Refuses(t *testing.T) {
	needLib(t)
	c := newQ4Case(1, 8, 64, rand.New(rand.NewPCG(1, 1)))
	m := tModel{
		opsets: map[string]int64{"": 17, OpDomain: 1},
		inputs: []tValue{{name: "a", dtype: Float32, dims: []any{"M", c.K}}},
		inits: []tInit{{name: "b", dims: []int64{8, 1, 32}, u8: c.b},
			{name: "scales", dims: []int64{8}, f32: c.scales[:8]}},
		nodes: []tNode{{op: "MatMulNBits", domain: OpDomain, in: []string{"a", "b", "scales"}, out: []string{"y"},
			attrs: [][]byte{attrInt("K", 64), attrInt("N", 8), attrInt("bits", 4), attrInt("block_size", 64)}}},
		outs: []tValue{{name: "y", dtype: Float32, dims: []any{"M", 8}}},
	}
	s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 1})
	if err == nil {
		_, err = s.Run(context.Background(), map[string]*Tensor{})
		s.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "com.microsoft.MatMulNBits") {
		t.Fatalf("block_size 64: err = %v, want one naming com.microsoft.MatMulNBits", err)
	}
}

// BenchmarkMatMulQ4VsMatMulNBits times ai.edgeinfer.MatMulNBits against
// com.microsoft.MatMulNBits (accuracy_level 4, MLAS's int8 path) on the
// same weights, two intra-op threads (EDGEINFER_BENCH_THREADS), in alternated rounds: synthetic-110m's
// projections as a decode step runs them (one row: GEMV) and as a 256-token
// prefill chunk does (GEMM). One matrix's weights (≤ 1.2 MB but lm_head's
// 15 MB) stay in the cache between calls, so this measures the kernels'
// arithmetic more than the memory; BenchmarkDecodeRate (runtime/engine)
// measures the whole model. Reports per shape the medians of each and of
// the per-round ratios (ours ÷ theirs time: below 1 is faster).
func BenchmarkMatMulQ4VsMatMulNBits(b *testing.B) {
	needLib(b)
	shapes := []struct {
		name    string
		M, N, K int
	}{
		{"gemv-qkv-768x1280", 1, 1280, 768}, {"gemv-o-768x768", 1, 768, 768},
		{"gemv-gateup-768x4096", 1, 4096, 768}, {"gemv-768x2048", 1, 2048, 768}, {"gemv-down-2048x768", 1, 768, 2048},
		{"gemv-lmhead-768x32000", 1, 32000, 768},
		{"gemm256-768x2048", 256, 2048, 768}, {"gemm256-2048x768", 256, 768, 2048},
		{"tinylm-gemm256-256x768", 256, 768, 256},
	}
	const rounds = 9
	threads := 2
	if v, err := strconv.Atoi(os.Getenv("EDGEINFER_BENCH_THREADS")); err == nil && v > 0 {
		threads = v
	}
	r := rand.New(rand.NewPCG(9, 9))
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			c := newQ4Case(sh.M, sh.N, sh.K, r)
			// time runs one op n times: wall µs per call, and with one
			// thread the calling thread's CPU µs per call, which other
			// processes on a shared machine disturb far less.
			timed := map[string]func(n int) (wall, cpu float64){}
			for _, op := range []string{"y", "y4"} {
				bind, _ := bindQ4(b, c, op, threads)
				timed[op] = func(n int) (float64, float64) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					start, cpu0 := time.Now(), threadCPU()
					for range n {
						if err := bind.Run(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
					return float64(time.Since(start).Microseconds()) / float64(n), float64(threadCPU()-cpu0) / 1e3 / float64(n)
				}
			}
			// calls per round: about 10 ms of work each
			w, _ := timed["y4"](3)
			n := max(1, int(10e3/w))
			for b.Loop() {
				var ours, theirs, ratios, cpuRatios []float64
				for range rounds {
					o, oc := timed["y"](n)
					t, tc := timed["y4"](n)
					ours, theirs, ratios = append(ours, o), append(theirs, t), append(ratios, o/t)
					cpuRatios = append(cpuRatios, oc/tc)
				}
				b.Logf("%s, %d threads: ours %.1f µs, MatMulNBits %.1f µs per call (medians of %d rounds of %d); ours ÷ theirs: wall %.3f (rounds %.3f)",
					sh.name, threads, median(ours), median(theirs), rounds, n, median(ratios), ratios)
				b.ReportMetric(median(ours), "ours-µs")
				b.ReportMetric(median(theirs), "matmulnbits-µs")
				b.ReportMetric(median(ratios), "ours/theirs")
				if threads == 1 {
					b.Logf("%s: ours ÷ theirs in thread CPU time %.3f (rounds %.3f)", sh.name, median(cpuRatios), cpuRatios)
					b.ReportMetric(median(cpuRatios), "cpu-ours/theirs")
				}
			}
		})
	}
}

func mustCopy[T Element](tb testing.TB, shape []int64, data []T) *Tensor {
	tb.Helper()
	x, err := CopyTensor(shape, data)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { x.Close() })
	return x
}

func median(x []float64) float64 {
	y := slices.Clone(x)
	slices.Sort(y)
	return y[len(y)/2]
}

// TestKernelMatMulQ4WeightsAsInputs: weights that are graph inputs, not
// constants (which the node copies when it loads), are read at each run
// and give the same product.
func TestKernelMatMulQ4WeightsAsInputs(t *testing.T) {
	needLib(t)
	for _, bits := range []int{4, 8} {
		c := newNBitsCase(bits, 5, 24, 96, rand.New(rand.NewPCG(2, 2)))
		nb, width := int64(c.nb()), int64(4*bits)
		m := tModel{
			opsets: map[string]int64{"": 17, OpDomain: 1},
			inputs: []tValue{{name: "a", dtype: Float32, dims: []any{"M", c.K}},
				{name: "b", dtype: Uint8, dims: []any{c.N, nb, width}}, {name: "scales", dtype: Float32, dims: []any{int64(c.N) * nb}}},
			nodes: []tNode{{op: "MatMulNBits", domain: OpDomain, in: []string{"a", "b", "scales"}, out: []string{"y"},
				attrs: [][]byte{attrInt("K", int64(c.K)), attrInt("N", int64(c.N)), attrInt("bits", int64(bits)), attrInt("block_size", 32)}}},
			outs: []tValue{{name: "y", dtype: Float32, dims: []any{"M", c.N}}},
		}
		s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		out, err := s.Run(context.Background(), map[string]*Tensor{
			"a":      mustCopy(t, []int64{int64(c.M), int64(c.K)}, c.a),
			"b":      mustCopy(t, []int64{int64(c.N), nb, width}, c.b),
			"scales": mustCopy(t, []int64{int64(c.N) * nb}, c.scales),
		})
		if err != nil {
			t.Fatal(err)
		}
		defer CloseAll(out)
		got, err := Data[float32](out["y"])
		if err != nil {
			t.Fatal(err)
		}
		cs, err := NewSession(context.Background(), q4Model(c, "y"), Options{IntraOpThreads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		want := c.run(t, cs)["y"]
		if d := maxAbsDiff(got, want); d != 0 {
			t.Errorf("bits %d: weights as inputs differ from constant weights by %g", bits, d)
		}
	}
}

// TestKernelMatMulQ4SwiGLU: a node with swiglu=1 — B the gate and up
// projections stacked, y = silu(a·gateᵀ)·(a·upᵀ) — against the float64
// reference of the same quantised product and against the standard
// spelling (com.microsoft.MatMulNBits, Split, Sigmoid, Mul, Mul) on every
// variant, int4 and int8. Allowance per output: the two halves' own
// (float rounding against the reference; the quantisation bound against
// MatMulNBits) carried through silu(g)·u, whose slope in g is at most 1.1.
func TestKernelMatMulQ4SwiGLU(t *testing.T) {
	needLib(t)
	type prepared struct {
		c                           *q4Case
		s                           *Session
		quantised, bound, magnitude []float64
	}
	var all []*prepared
	r := rand.New(rand.NewPCG(7, 7))
	for _, bits := range []int{4, 8} {
		for _, sh := range []struct{ M, N, K int }{{1, 64, 256}, {3, 48, 100}, {6, 32, 31}, {17, 80, 544}} {
			c := newNBitsCase(bits, sh.M, sh.N, sh.K, r)
			if sh.N%32 == 16 { // these two shapes with float16 scales
				f16Scales(c, r)
			}
			nb := int64(c.nb())
			attrs := func(extra ...[]byte) [][]byte {
				return append([][]byte{attrInt("K", int64(c.K)), attrInt("N", int64(c.N)), attrInt("bits", int64(bits)),
					attrInt("block_size", 32)}, extra...)
			}
			in := []string{"a", "b", "scales"}
			m := tModel{
				opsets: map[string]int64{"": 18, OpDomain: 1, "com.microsoft": 1},
				inputs: []tValue{{name: "a", dtype: Float32, dims: []any{"M", c.K}}},
				inits: []tInit{{name: "b", dims: []int64{int64(c.N), nb, int64(4 * bits)}, u8: c.b},
					{name: "scales", dims: []int64{int64(c.N) * nb}, f32: c.scales}},
				nodes: []tNode{
					{op: "MatMulNBits", domain: OpDomain, in: in, out: []string{"y"}, attrs: attrs(attrInt("swiglu", 1))},
					{op: "MatMulNBits", domain: "com.microsoft", in: in, out: []string{"gu"}, attrs: attrs(attrInt("accuracy_level", 4))},
					{op: "Split", in: []string{"gu"}, out: []string{"g", "u"}, attrs: [][]byte{attrInt("axis", -1), attrInt("num_outputs", 2)}},
					{op: "Sigmoid", in: []string{"g"}, out: []string{"sg"}},
					{op: "Mul", in: []string{"g", "sg"}, out: []string{"silu"}},
					{op: "Mul", in: []string{"silu", "u"}, out: []string{"y4"}},
				},
				outs: []tValue{{name: "y", dtype: Float32, dims: []any{"M", c.N / 2}}, {name: "y4", dtype: Float32, dims: []any{"M", c.N / 2}}},
			}
			s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			p := &prepared{c: c, s: s}
			_, p.quantised, p.bound, p.magnitude = c.reference()
			all = append(all, p)
		}
	}
	silu := func(g float64) float64 { return g / (1 + math.Exp(-g)) }
	forEachVariant(t, "int4 matmul", q4Compiled(), q4Variants(), q4Variant(), useQ4Variant, func(t *testing.T, v string) {
		var worstRef, worstMS float64
		for _, p := range all {
			got := p.c.run(t, p.s)
			half := p.c.N / 2
			for m := range p.c.M {
				for n := range half {
					gi, ui := m*p.c.N+n, m*p.c.N+half+n
					g, u := p.quantised[gi], p.quantised[ui]
					carry := func(dg, du float64) float64 { return 1.1*dg*(math.Abs(u)+du) + math.Abs(silu(g))*du }
					y := float64(got["y"][m*half+n])
					tolG, tolU := 1e-5*p.magnitude[gi]+1e-6, 1e-5*p.magnitude[ui]+1e-6
					worstRef = max(worstRef, math.Abs(y-silu(g)*u)/(carry(tolG, tolU)+1e-6*math.Abs(silu(g)*u)))
					worstMS = max(worstMS, math.Abs(y-float64(got["y4"][m*half+n]))/(carry(2*p.bound[gi]+tolG, 2*p.bound[ui]+tolU)))
				}
			}
		}
		t.Logf("%s swiglu, worst as a share of the allowance: vs quantised reference %.3f, vs MatMulNBits+Split+Sigmoid+Mul %.3f",
			v, worstRef, worstMS)
		if worstRef > 1 || worstMS > 1 {
			t.Errorf("%s: swiglu off by %.2f (reference) and %.2f (standard ops) times the allowance", v, worstRef, worstMS)
		}
	})
}

// BenchmarkMatMulQ4PrefillRows is the 256-bit int4 tiles' six rows a tile
// in a prefill chunk (matmul_q4.c's prefill_rows) against four, in one
// thread (its CPU time, which other processes disturb far less than the
// wall time), alternated round by round, on synthetic-1b's prefill shapes
// and a 110m one, for the variant this CPU picked: GODEBUG=cpu.avx512f=off
// runs the AVX-VNNI tile, adding cpu.avxvnni=off the AVX2 one. Reports the
// median of the per-round ratios, six rows ÷ four (below 1 is faster).
func BenchmarkMatMulQ4PrefillRows(b *testing.B) {
	needLib(b)
	if q4Variant() != "avx2" && q4Variant() != "avxvnni" {
		b.Skipf("the %s variant has no prefill rows of its own (GODEBUG=cpu.avx512f=off picks avxvnni here, adding cpu.avxvnni=off avx2)", q4Variant())
	}
	defer setPrefillRows(true)
	r := rand.New(rand.NewPCG(9, 9))
	for _, sh := range []struct{ M, N, K int }{{128, 2048, 2048}, {128, 11264, 2048}, {128, 2048, 5632}, {256, 2048, 768}, {512, 2048, 2048}} {
		b.Run(fmt.Sprintf("%dx%dx%d", sh.M, sh.N, sh.K), func(b *testing.B) {
			bind, _ := bindQ4(b, newQ4Case(sh.M, sh.N, sh.K, r), "y", 1)
			cpu := func(six bool, n int) float64 { // CPU µs a call
				setPrefillRows(six)
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				cpu0 := threadCPU()
				for range n {
					if err := bind.Run(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				return float64(threadCPU()-cpu0) / 1e3 / float64(n)
			}
			n := max(1, int(30e3/cpu(true, 2))) // ~30 ms a round
			for b.Loop() {
				var six, four, ratios []float64
				for range 9 {
					s6, s4 := cpu(true, n), cpu(false, n)
					six, four, ratios = append(six, s6), append(four, s4), append(ratios, s6/s4)
				}
				b.Logf("%s, one thread: six rows %.1f µs, four %.1f µs a call; six ÷ four %.3f (rounds %.3f)",
					q4Variant(), median(six), median(four), median(ratios), ratios)
				b.ReportMetric(median(ratios), "six/four")
			}
		})
	}
}

// TestKernelMatMulQ4PrefillRows: a prefill chunk's product on the tiles of
// six rows (matmul_q4.c's prefill_rows: the AVX2 and AVX-VNNI variants)
// writes every output, bit for bit as on tiles of four — each output is
// the same blocks' sums in the same order — for every remainder of rows
// a last tile can have, int4 and int8, on every variant this CPU runs.
// The output is bound and filled with NaN before each run, so that an
// output a tile skips cannot pass with what an earlier run left there.
func TestKernelMatMulQ4PrefillRows(t *testing.T) {
	needLib(t)
	defer setPrefillRows(true)
	r := rand.New(rand.NewPCG(5, 8))
	forEachVariant(t, "int4 matmul", q4Compiled(), q4Variants(), q4Variant(), useQ4Variant, func(t *testing.T, v string) {
		for _, bits := range []int{4, 8} {
			for _, M := range []int{9, 10, 11, 12, 13, 14, 17, 64} {
				c := newNBitsCase(bits, M, 40, 96, r)
				bind, y := bindQ4(t, c, "y", 2)
				run := func(six bool) []float32 {
					setPrefillRows(six)
					d, _ := Data[float32](y)
					for i := range d {
						d[i] = float32(math.NaN())
					}
					if err := bind.Run(context.Background()); err != nil {
						t.Fatal(err)
					}
					return slices.Clone(d)
				}
				six, four := run(true), run(false)
				for i := range six {
					if math.Float32bits(six[i]) != math.Float32bits(four[i]) {
						t.Errorf("%s int%d M %d: output (%d, %d) = %g on the prefill rows, %g on four", v, bits, M, i/c.N, i%c.N, six[i], four[i])
						break
					}
				}
			}
		}
	})
}

// bindQ4 is c's product as output op of a session of `threads` intra-op
// threads (q4Model), bound to c's activations and an output tensor of its
// own; both live until the test ends.
func bindQ4(tb testing.TB, c *q4Case, op string, threads int) (*Binding, *Tensor) {
	tb.Helper()
	s, err := NewSession(context.Background(), q4Model(c, op), Options{IntraOpThreads: threads})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	out, err := NewEmptyTensor(Float32, []int64{int64(c.M), int64(c.N)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { out.Close() })
	bind, err := s.Bind(map[string]*Tensor{"a": mustCopy(tb, []int64{int64(c.M), int64(c.K)}, c.a)}, map[string]*Tensor{op: out})
	if err != nil {
		tb.Fatal(err)
	}
	return bind, out
}
