package llama

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// The graphs are checked by running them in ONNX Runtime (through
// runtime/ort, test-only: this package never links it) against refForward.

const tolerance = 1e-4

func newSession(t *testing.T, c *Config, src WeightSource, opts Options) *ort.Session {
	t.Helper()
	return graphSession(t, buildGraph(t, c, src, opts), 1)
}

// buildGraph builds c's graph from src with opts.
func buildGraph(tb testing.TB, c *Config, src WeightSource, opts Options) *onnx.ModelProto {
	tb.Helper()
	b := onnx.NewBuilder("test")
	if err := Build(b, c, src, opts); err != nil {
		tb.Fatal(err)
	}
	m, err := b.Model()
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// runner collects input tensors for one Run and closes them afterwards.
type runner struct {
	t    *testing.T
	in   map[string]*ort.Tensor
	pool *pool // fed pools, which a graph with slots writes (copied back after the run)
}

func newRunner(t *testing.T) *runner { return &runner{t: t, in: map[string]*ort.Tensor{}} }

func set[T ort.Element](r *runner, name string, shape []int64, data []T) {
	r.t.Helper()
	x, err := ort.CopyTensor(shape, data)
	if err != nil {
		r.t.Fatal(err)
	}
	r.in[name] = x
}

// run executes s and returns every output copied into Go memory with its
// shape.
func (r *runner) run(s *ort.Session) map[string]outTensor {
	r.t.Helper()
	defer func() {
		for _, x := range r.in {
			x.Close()
		}
	}()
	out, err := s.Run(context.Background(), r.in)
	if err != nil {
		r.t.Fatal(err)
	}
	defer ort.CloseAll(out)
	if r.pool != nil && r.in["slots"] != nil {
		r.pool.readBack(r)
	}
	res := map[string]outTensor{}
	for name, x := range out {
		if x.DType() == ort.Int64 { // the head's greedy token (greedy.go)
			data, err := ort.Data[int64](x)
			if err != nil {
				r.t.Fatal(err)
			}
			res[name] = outTensor{shape: x.Shape(), ints: append([]int64(nil), data...)}
			continue
		}
		data, err := ort.Data[float32](x)
		if err != nil {
			r.t.Fatal(err)
		}
		res[name] = outTensor{shape: x.Shape(), data: append([]float32(nil), data...)}
	}
	return res
}

type outTensor struct {
	shape []int64
	data  []float32
	ints  []int64 // an int64 output's
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// graphSession opens m in a session of threads intra-op threads, closed
// when tb ends.
func graphSession(tb testing.TB, m *onnx.ModelProto, threads int) *ort.Session {
	tb.Helper()
	raw, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := ort.NewSession(context.Background(), raw, ort.Options{IntraOpThreads: threads})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// sameBits fails tb at the first element where got and want differ in
// any bit (what names the two sides).
func sameBits(tb testing.TB, what string, got, want []float32) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%s: %d values against %d", what, len(got), len(want))
	}
	for i, x := range got {
		if math.Float32bits(x) != math.Float32bits(want[i]) {
			tb.Fatalf("%s: value %d is %g against %g", what, i, x, want[i])
		}
	}
}

// tinyGraph builds the tiny-test preset's graph with opts.
func tinyGraph(tb testing.TB, opts Options) *onnx.ModelProto {
	tb.Helper()
	c, src := tinyModel(tb)
	return buildGraph(tb, c, src, opts)
}

func tinyModel(t testing.TB) (*Config, WeightSource) {
	c, src, err := Preset("tiny-test")
	if err != nil {
		t.Fatal(err)
	}
	return c, src
}

func randomIDs(seed uint64, n, vocab int) []int64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = rng.Int64N(int64(vocab))
	}
	return ids
}

func iota64(from, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(from + i)
	}
	return out
}

// pool is a head-major paged KV pool [kvHeads, blocks, blockSize, headDim]
// per layer, kept as plain Go slices; the test scatters new K/V into it as
// the runtime would.
type pool struct {
	c            *Config
	blocks, bs   int
	keys, values [][]float32
}

func newPool(c *Config, blocks, bs int) *pool {
	p := &pool{c: c, blocks: blocks, bs: bs}
	for range c.NumHiddenLayers {
		n := c.NumKeyValueHeads * blocks * bs * c.HeadDim
		p.keys = append(p.keys, make([]float32, n))
		p.values = append(p.values, make([]float32, n))
	}
	return p
}

func (p *pool) feed(r *runner) {
	shape := []int64{int64(p.c.NumKeyValueHeads), int64(p.blocks), int64(p.bs), int64(p.c.HeadDim)}
	for i := range p.c.NumHiddenLayers {
		set(r, "key_cache."+strconv.Itoa(i), shape, p.keys[i])
		set(r, "value_cache."+strconv.Itoa(i), shape, p.values[i])
	}
	r.pool = p
}

// slots sets the input slots where s's graph writes the pools itself:
// row b's T tokens at positions ctx[b], ctx[b]+1, … of block table
// tables[b].
func (p *pool) slots(r *runner, s *ort.Session, tables [][]int64, ctx []int, T int) {
	if !slices.ContainsFunc(s.Inputs(), func(v ort.ValueInfo) bool { return v.Name == "slots" }) {
		return
	}
	var slots []int64
	for b, table := range tables {
		for t := range T {
			pos := ctx[b] + t
			slots = append(slots, table[pos/p.bs]*int64(p.bs)+int64(pos%p.bs))
		}
	}
	set(r, "slots", []int64{int64(len(tables)), int64(T)}, slots)
}

// prefill runs one row's first chunk on s: ids at positions 0, 1, … over
// block table table, the pools fed (and the slots set where s writes the
// pools itself), the last position's logits out.
func (p *pool) prefill(t *testing.T, s *ort.Session, ids, table []int64) map[string]outTensor {
	t.Helper()
	n := len(ids)
	r := newRunner(t)
	set(r, "input_ids", []int64{1, int64(n)}, ids)
	set(r, "position_ids", []int64{1, int64(n)}, iota64(0, n))
	set(r, "block_tables", []int64{1, int64(len(table))}, table)
	set(r, "context_lens", []int64{1}, []int64{0})
	set(r, "last_index", []int64{1}, []int64{int64(n - 1)})
	p.feed(r)
	p.slots(r, s, [][]int64{table}, []int{0}, n)
	return r.run(s)
}

// readBack copies the pools a graph with slots wrote from r's tensors.
func (p *pool) readBack(r *runner) {
	for i := range p.c.NumHiddenLayers {
		for kind, dst := range map[string][]float32{"key_cache.": p.keys[i], "value_cache.": p.values[i]} {
			data, err := ort.Data[float32](r.in[kind+strconv.Itoa(i)])
			if err != nil {
				r.t.Fatal(err)
			}
			copy(dst, data)
		}
	}
}

// scatter writes row b's tokens [0, n) of new_keys/new_values [B,kvH,T,D]
// to positions ctx, ctx+1, … of the sequence whose block table is table,
// where the graph returned them (not where it wrote the pools itself).
func (p *pool) scatter(out map[string]outTensor, b, n, ctx int, table []int64) {
	if _, ok := out["new_keys.0"]; !ok {
		return
	}
	d, hkv := p.c.HeadDim, p.c.NumKeyValueHeads
	for i := range p.c.NumHiddenLayers {
		for kind, dst := range map[string][]float32{"new_keys.": p.keys[i], "new_values.": p.values[i]} {
			src := out[kind+strconv.Itoa(i)]
			T := int(src.shape[2])
			for h := range hkv {
				for t := range n {
					pos := ctx + t
					blk := int(table[pos/p.bs])
					to := ((h*p.blocks+blk)*p.bs + pos%p.bs) * d
					from := ((b*hkv+h)*T + t) * d
					copy(dst[to:to+d], src.data[from:from+d])
				}
			}
		}
	}
}

// TestPagedMatchesReference: a prefill and decode steps over a scattered
// block table match the reference, with the graph writing the pools
// itself (slots) and with the caller scattering its new_keys/new_values.
func TestPagedMatchesReference(t *testing.T) {
	orttest.Need(t)
	c, src := tinyModel(t)
	const prompt, steps, bs = 16, 4, 4
	ids := randomIDs(1, prompt+steps, c.VocabSize)
	ref := refForward(c, src, ids)
	for _, caller := range []bool{false, true} {
		t.Run(fmt.Sprintf("caller scatters %v", caller), func(t *testing.T) {
			s := newSession(t, c, src, Options{BlockSize: bs, CallerScatters: caller})
			returns := slices.ContainsFunc(s.Outputs(), func(v ort.ValueInfo) bool { return v.Name == "new_keys.0" })
			takes := slices.ContainsFunc(s.Inputs(), func(v ort.ValueInfo) bool { return v.Name == "slots" })
			if returns != caller || takes == caller {
				t.Fatalf("CallerScatters %v: new_keys.0 output %v, slots input %v", caller, returns, takes)
			}
			p := newPool(c, 8, bs)
			table := []int64{6, 2, 7, 0, 3, 5} // scattered blocks: 24 slots
			out := p.prefill(t, s, ids[:prompt], table)
			if d := maxDiff(out["logits"].data, ref[prompt-1]); d > tolerance {
				t.Fatalf("prefill logits differ from reference by %g", d)
			}
			p.scatter(out, 0, prompt, 0, table)
			for step := range steps {
				ctx := prompt + step
				r := newRunner(t)
				set(r, "input_ids", []int64{1, 1}, ids[ctx:ctx+1])
				set(r, "position_ids", []int64{1, 1}, []int64{int64(ctx)})
				set(r, "block_tables", []int64{1, int64(len(table))}, table)
				set(r, "context_lens", []int64{1}, []int64{int64(ctx)})
				set(r, "last_index", []int64{1}, []int64{0})
				p.feed(r)
				p.slots(r, s, [][]int64{table}, []int{ctx}, 1)
				out := r.run(s)
				d := maxDiff(out["logits"].data, ref[ctx])
				t.Logf("decode step %d (context %d): max |Δlogit| = %.2g", step, ctx, d)
				if d > tolerance {
					t.Fatalf("decode step %d differs from reference by %g", step, d)
				}
				p.scatter(out, 0, 1, ctx, table)
			}
		})
	}
}

// TestPagedHiddenStates: with Options.HiddenStates the paged graph returns
// every position's final hidden state, as the reference computes it, and
// the same last-position logits as without.
func TestPagedHiddenStates(t *testing.T) {
	orttest.Need(t)
	c, src := tinyModel(t)
	const prompt, bs = 10, 4
	ids := randomIDs(3, prompt, c.VocabSize)
	ref, hidden := refForwardHidden(c, src, ids)
	table := []int64{1, 0, 2}
	feed := func(r *runner) {
		set(r, "input_ids", []int64{1, prompt}, ids)
		set(r, "position_ids", []int64{1, prompt}, iota64(0, prompt))
		set(r, "block_tables", []int64{1, int64(len(table))}, table)
		set(r, "context_lens", []int64{1}, []int64{0})
		set(r, "last_index", []int64{1}, []int64{prompt - 1})
	}
	for _, portable := range []bool{false, true} {
		r := newRunner(t)
		feed(r)
		s := newSession(t, c, src, Options{BlockSize: bs, HiddenStates: true, PortableAttention: portable})
		p := newPool(c, 4, bs)
		p.feed(r)
		p.slots(r, s, [][]int64{table}, []int{0}, prompt)
		out := r.run(s)
		hs := out["hidden_states"]
		if want := []int64{1, prompt, int64(c.HiddenSize)}; len(hs.shape) != 3 || hs.shape[1] != want[1] || hs.shape[2] != want[2] {
			t.Fatalf("portable=%v: hidden_states shape %v, want %v", portable, hs.shape, want)
		}
		for p := range prompt {
			if d := maxDiff(hs.data[p*c.HiddenSize:(p+1)*c.HiddenSize], hidden[p]); d > tolerance {
				t.Fatalf("portable=%v: hidden state %d differs from reference by %g", portable, p, d)
			}
		}
		if d := maxDiff(out["logits"].data, ref[prompt-1]); d > tolerance {
			t.Fatalf("portable=%v: logits differ from reference by %g", portable, d)
		}
	}
	if err := Build(onnx.NewBuilder("x"), c, src, Options{Contract: ContractCompatible, HiddenStates: true}); err == nil {
		t.Fatal("hidden states on the compatible contract: no error")
	}
}

func TestPagedAllLogitsAndRaggedBatch(t *testing.T) {
	orttest.Need(t)
	c, src := tinyModel(t)
	const bs = 4
	lens := []int{11, 5, 8}
	seqs := make([][]int64, len(lens))
	refs := make([][][]float32, len(lens))
	for i, n := range lens {
		seqs[i] = randomIDs(uint64(10+i), n+1, c.VocabSize)
		refs[i] = refForward(c, src, seqs[i])
	}
	all := newSession(t, c, src, Options{BlockSize: bs, AllLogits: true})
	last := newSession(t, c, src, Options{BlockSize: bs})
	p := newPool(c, 12, bs)
	tables := [][]int64{{0, 4, 8}, {1, 5, 1}, {9, 2, 0}} // padded with valid ids

	// Prefill each sequence alone, checking every position.
	for i, n := range lens {
		r := newRunner(t)
		set(r, "input_ids", []int64{1, int64(n)}, seqs[i][:n])
		set(r, "position_ids", []int64{1, int64(n)}, iota64(0, n))
		set(r, "block_tables", []int64{1, 3}, tables[i])
		set(r, "context_lens", []int64{1}, []int64{0})
		p.feed(r)
		p.slots(r, all, tables[i:i+1], []int{0}, n)
		out := r.run(all)
		if got := out["logits"].shape; got[1] != int64(n) || got[2] != int64(c.VocabSize) {
			t.Fatalf("logits shape %v", got)
		}
		V := c.VocabSize
		for pos := range n {
			if d := maxDiff(out["logits"].data[pos*V:(pos+1)*V], refs[i][pos]); d > tolerance {
				t.Fatalf("seq %d position %d differs by %g", i, pos, d)
			}
		}
		p.scatter(out, 0, n, 0, tables[i])
	}
	// One decode step of all three together, ragged context lengths.
	B := int64(len(lens))
	r := newRunner(t)
	var next, pos, ctxs, flat []int64
	for i, n := range lens {
		next = append(next, seqs[i][n])
		pos = append(pos, int64(n))
		ctxs = append(ctxs, int64(n))
		flat = append(flat, tables[i]...)
	}
	set(r, "input_ids", []int64{B, 1}, next)
	set(r, "position_ids", []int64{B, 1}, pos)
	set(r, "block_tables", []int64{B, 3}, flat)
	set(r, "context_lens", []int64{B}, ctxs)
	set(r, "last_index", []int64{B}, make([]int64, B))
	p.feed(r)
	p.slots(r, last, tables, lens, 1)
	out := r.run(last)
	V := c.VocabSize
	for i, n := range lens {
		if d := maxDiff(out["logits"].data[i*V:(i+1)*V], refs[i][n]); d > tolerance {
			t.Fatalf("batched decode row %d differs from reference by %g", i, d)
		}
	}
}

func TestCompatibleMatchesReference(t *testing.T) {
	orttest.Need(t)
	c, src := tinyModel(t)
	const prompt, steps = 16, 4
	ids := randomIDs(1, prompt+steps, c.VocabSize)
	ref := refForward(c, src, ids)
	s := newSession(t, c, src, Options{Contract: ContractCompatible})
	hkv, d := int64(c.NumKeyValueHeads), int64(c.HeadDim)

	past := map[string]outTensor{}
	for i := range c.NumHiddenLayers {
		for _, kind := range []string{".key", ".value"} {
			past["present."+strconv.Itoa(i)+kind] = outTensor{shape: []int64{1, hkv, 0, d}}
		}
	}
	feed := func(from, n int) [][]float32 {
		r := newRunner(t)
		set(r, "input_ids", []int64{1, int64(n)}, ids[from:from+n])
		set(r, "attention_mask", []int64{1, int64(from + n)}, onesI64(from+n))
		set(r, "position_ids", []int64{1, int64(n)}, iota64(from, n))
		for i := range c.NumHiddenLayers {
			for _, kind := range []string{".key", ".value"} {
				pt := past["present."+strconv.Itoa(i)+kind]
				set(r, "past_key_values."+strconv.Itoa(i)+kind, pt.shape, pt.data)
			}
		}
		out := r.run(s)
		past = out
		V := c.VocabSize
		rows := make([][]float32, n)
		for t := range n {
			rows[t] = out["logits"].data[t*V : (t+1)*V]
		}
		return rows
	}
	rows := feed(0, prompt)
	for pos, row := range rows {
		if dd := maxDiff(row, ref[pos]); dd > tolerance {
			t.Fatalf("prefill position %d differs from reference by %g", pos, dd)
		}
	}
	for step := range steps {
		ctx := prompt + step
		row := feed(ctx, 1)[0]
		dd := maxDiff(row, ref[ctx])
		t.Logf("decode step %d (context %d): max |Δlogit| = %.2g", step, ctx, dd)
		if dd > tolerance {
			t.Fatalf("decode step %d differs from reference by %g", step, dd)
		}
	}
}

func onesI64(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// nodesOf counts m's nodes of op, in domain (any domain where it is "*").
func nodesOf(m *onnx.ModelProto, op, domain string) int {
	n := 0
	for _, node := range m.GetGraph().GetNode() {
		if node.GetOpType() == op && (domain == "*" || node.GetDomain() == domain) {
			n++
		}
	}
	return n
}
