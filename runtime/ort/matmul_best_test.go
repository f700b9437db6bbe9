package ort

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/vec"
)

// TestKernelMatMulQ4Best: output 2, each row's largest output, is
// pkg/vec's Argmax of the row the node wrote, on every variant, int4 and
// int8: decode rows and prefill tiles, N not a multiple of a work item's
// columns and wide enough for many batches; ties inside one work item and
// across batches (weight rows repeated, their scales raised so that they
// are often a row's maximum), a NaN first in every row and one beside
// the ties, and an infinity (weight rows with such scales). The outputs must be those of the same
// node without output 2, bit for bit.
func TestKernelMatMulQ4Best(t *testing.T) {
	needLib(t)
	type prepared struct {
		c *q4Case
		s *Session
	}
	var all []*prepared
	r := rand.New(rand.NewPCG(17, 9))
	for _, bits := range []int{4, 8} {
		for _, sh := range []struct{ M, N, K int }{{1, 2048, 768}, {1, 33, 100}, {1, 7, 64}, {3, 40, 288}, {4, 4000, 64},
			{8, 1000, 96}, {9, 5, 31}, {13, 300, 96}} {
			c := newNBitsCase(bits, sh.M, sh.N, sh.K, r)
			nb := c.nb()
			row := len(c.b) / c.N
			repeat := func(from, to int) {
				copy(c.b[to*row:(to+1)*row], c.b[from*row:(from+1)*row])
				copy(c.scales[to*nb:(to+1)*nb], c.scales[from*nb:(from+1)*nb])
			}
			if c.N >= 8 {
				at := c.N / 3
				for blk := range nb {
					c.scales[at*nb+blk] *= 8
				}
				repeat(at, at+1)  // the same work item
				repeat(at, c.N-1) // the last batch
			}
			if c.N >= 8 && len(all)%2 == 1 { // every other case: a tie is seldom the maximum beside +Inf
				at := c.N / 3
				for blk := range nb {
					c.scales[blk] = float32(math.NaN())           // output 0 of every row NaN,
					c.scales[(at+2)*nb+blk] = float32(math.NaN()) // and one beside the ties
					c.scales[2*nb+blk] = float32(math.Inf(-1))    // output 2 infinite (or NaN)
				}
			}
			attrs := [][]byte{attrInt("K", int64(c.K)), attrInt("N", int64(c.N)), attrInt("bits", int64(bits)), attrInt("block_size", 32)}
			m := tModel{
				opsets: map[string]int64{"": 17, OpDomain: 1},
				inputs: []tValue{{name: "a", dtype: Float32, dims: []any{"M", c.K}}},
				inits: []tInit{{name: "b", dims: []int64{int64(c.N), int64(nb), int64(4 * bits)}, u8: c.b},
					{name: "scales", dims: []int64{int64(c.N * nb)}, f32: c.scales}},
				nodes: []tNode{
					{op: "MatMulNBits", domain: OpDomain, in: []string{"a", "b", "scales"}, out: []string{"y", "", "best"}, attrs: attrs},
					{op: "MatMulNBits", domain: OpDomain, in: []string{"a", "b", "scales"}, out: []string{"y1"}, attrs: attrs},
				},
				outs: []tValue{{name: "y", dtype: Float32, dims: []any{"M", c.N}}, {name: "best", dtype: Int64, dims: []any{"M"}},
					{name: "y1", dtype: Float32, dims: []any{"M", c.N}}},
			}
			s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			all = append(all, &prepared{c: c, s: s})
		}
	}
	forEachVariant(t, "int4 matmul", q4Compiled(), q4Variants(), q4Variant(), useQ4Variant, func(t *testing.T, v string) {
		ties, nan := 0, 0
		for _, p := range all {
			c := p.c
			a := mustCopy(t, []int64{int64(c.M), int64(c.K)}, c.a)
			out, err := p.s.Run(context.Background(), map[string]*Tensor{"a": a})
			a.Close()
			if err != nil {
				t.Fatal(err)
			}
			y, _ := Data[float32](out["y"])
			y1, _ := Data[float32](out["y1"])
			best, err := Data[int64](out["best"])
			if err != nil || len(best) != c.M {
				t.Fatalf("%d×%d×%d: best %v (%v), want %d indices", c.M, c.N, c.K, best, err, c.M)
			}
			for i := range y {
				if math.Float32bits(y[i]) != math.Float32bits(y1[i]) {
					t.Fatalf("%s %d×%d×%d: y[%d] = %g with output 2, %g without", v, c.M, c.N, c.K, i, y[i], y1[i])
				}
			}
			for m := range c.M {
				row := y[m*c.N : (m+1)*c.N]
				if want := vec.Argmax(row); best[m] != int64(want) {
					t.Errorf("%s bits %d %d×%d×%d row %d: best %d (%g), want %d (%g)", v, c.bits, c.M, c.N, c.K, m, best[m], row[best[m]], want, row[want])
				}
				mx := row[vec.Argmax(row)]
				if n := len(slices.DeleteFunc(slices.Clone(row), func(x float32) bool { return x != mx })); n > 1 {
					ties++
				}
				if row[0] != row[0] && slices.ContainsFunc(row, func(x float32) bool { return math.IsInf(float64(x), 0) }) {
					nan++
				}
			}
			CloseAll(out)
		}
		if nan == 0 {
			t.Errorf("%s: no row held a NaN and an infinity; the cases test neither", v)
		}
		if ties == 0 {
			t.Errorf("%s: no row had its maximum twice; the cases test no ties", v)
		}
		t.Logf("%s: rows with a tied maximum %d, rows with a NaN first and an infinity %d", v, ties, nan)
	})
}

// TestKernelMatMulQ4BestRefuses: output 2 with swiglu (whose outputs are
// an activation, not scores to pick from) is refused, naming it.
func TestKernelMatMulQ4BestRefuses(t *testing.T) {
	needLib(t)
	c := newQ4Case(1, 16, 64, rand.New(rand.NewPCG(1, 1)))
	m := tModel{
		opsets: map[string]int64{"": 17, OpDomain: 1},
		inputs: []tValue{{name: "a", dtype: Float32, dims: []any{"M", c.K}}},
		inits:  []tInit{{name: "b", dims: []int64{16, 2, 16}, u8: c.b}, {name: "scales", dims: []int64{32}, f32: c.scales}},
		nodes: []tNode{{op: "MatMulNBits", domain: OpDomain, in: []string{"a", "b", "scales"}, out: []string{"y", "", "best"},
			attrs: [][]byte{attrInt("K", 64), attrInt("N", 16), attrInt("bits", 4), attrInt("block_size", 32), attrInt("swiglu", 1)}}},
		outs: []tValue{{name: "y", dtype: Float32, dims: []any{"M", 8}}, {name: "best", dtype: Int64, dims: []any{"M"}}},
	}
	s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := mustCopy(t, []int64{1, 64}, c.a)
	defer a.Close()
	out, err := s.Run(context.Background(), map[string]*Tensor{"a": a})
	if err == nil {
		CloseAll(out)
	}
	if err == nil || !strings.Contains(err.Error(), "output 2") || !strings.Contains(err.Error(), "swiglu") {
		t.Fatalf("output 2 with swiglu: err = %v, want a refusal naming output 2 and swiglu", err)
	}
}

// BenchmarkMatMulQ4Best: a language-model head's product (110m's, 768 by
// a 32k vocabulary, int4) with output 2 against the same product followed
// by pkg/vec's Argmax of each row in Go — what a greedy sampler did before
// the head gave the index — and against the product alone, at batch 1 and
// 8: medians of nine rounds of ~50 ms each, the three calls in turn, two
// threads that do not spin (two sessions alternate).
//
//	go test ./runtime/ort -run '^$' -bench MatMulQ4Best -benchtime 1x
func BenchmarkMatMulQ4Best(b *testing.B) {
	needLib(b)
	const N, K, rounds = 32000, 768, 9
	r := rand.New(rand.NewPCG(5, 5))
	for _, M := range []int{1, 8} {
		b.Run("M"+strconv.Itoa(M), func(b *testing.B) {
			c := newQ4Case(M, N, K, r)
			nb := c.nb()
			attrs := [][]byte{attrInt("K", K), attrInt("N", N), attrInt("bits", 4), attrInt("block_size", 32)}
			run := map[string]func() float64{}
			sink := 0
			// a session each, so that every call reads its weights from
			// where the calls before it left them (three heads' weights
			// exceed the caches, as a model's do)
			for _, name := range []string{"plain", "argmax", "best"} {
				with := name == "best"
				m := tModel{
					opsets: map[string]int64{"": 17, OpDomain: 1},
					inputs: []tValue{{name: "a", dtype: Float32, dims: []any{"M", K}}},
					inits: []tInit{{name: "b", dims: []int64{N, int64(nb), 16}, u8: c.b},
						{name: "scales", dims: []int64{int64(N * nb)}, f32: c.scales}},
					nodes: []tNode{{op: "MatMulNBits", domain: OpDomain, in: []string{"a", "b", "scales"}, out: []string{"y"}, attrs: attrs}},
					outs:  []tValue{{name: "y", dtype: Float32, dims: []any{"M", N}}},
				}
				if with {
					m.nodes[0].out = []string{"y", "", "best"}
					m.outs = append(m.outs, tValue{name: "best", dtype: Int64, dims: []any{"M"}})
				}
				// no spinning: the calls of the two sessions alternate, and
				// one's spinning threads would take the cores of the other
				s, err := NewSession(context.Background(), m.encode(), Options{IntraOpThreads: 2, NoSpinning: true})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				a := mustCopy(b, []int64{int64(M), K}, c.a)
				defer a.Close()
				y, err := NewEmptyTensor(Float32, []int64{int64(M), N})
				if err != nil {
					b.Fatal(err)
				}
				defer y.Close()
				out := map[string]*Tensor{"y": y}
				if with {
					best, err := NewEmptyTensor(Int64, []int64{int64(M)})
					if err != nil {
						b.Fatal(err)
					}
					defer best.Close()
					out["best"] = best
				}
				bind, err := s.Bind(map[string]*Tensor{"a": a}, out)
				if err != nil {
					b.Fatal(err)
				}
				rows, _ := Data[float32](y)
				call := func(argmax bool) func() float64 {
					return func() float64 {
						start := time.Now()
						if err := bind.Run(context.Background()); err != nil {
							b.Fatal(err)
						}
						if argmax {
							for m := range M {
								sink += vec.Argmax(rows[m*N : (m+1)*N])
							}
						}
						return float64(time.Since(start).Nanoseconds()) / 1e3
					}
				}
				run[name] = call(name == "argmax")
			}
			// A round: n calls of each, one of each in turn (each
			// first, second and third as often), so that a change in the
			// memory bus's speed, and the call before, meet all three
			// alike.
			n := max(1, int(50e3/run["plain"]()))
			for b.Loop() {
				var best, plain, argmax, vsArgmax, vsPlain []float64
				for range rounds {
					sum := map[string]float64{}
					names := []string{"plain", "argmax", "best"}
					for i := range 3 * n { // each first, second and third in turn
						name := names[(i+i/3)%3]
						sum[name] += run[name]()
					}
					p, g, x := sum["plain"]/float64(n), sum["argmax"]/float64(n), sum["best"]/float64(n)
					plain, argmax, best = append(plain, p), append(argmax, g), append(best, x)
					vsArgmax, vsPlain = append(vsArgmax, x/g), append(vsPlain, x/p)
				}
				b.Logf("M=%d: product %.1f µs, product + Go argmax %.1f µs, product with output 2 %.1f µs (medians of %d rounds of %d); with output 2 ÷ product + argmax %.3f (rounds %.3f), ÷ product alone %.3f",
					M, median(plain), median(argmax), median(best), rounds, n, median(vsArgmax), vsArgmax, median(vsPlain))
				b.ReportMetric(median(vsArgmax), "best/argmax")
				b.ReportMetric(median(vsPlain), "best/plain")
			}
		})
	}
}
