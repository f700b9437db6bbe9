package llm

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// tinyBundle builds the tiny-test preset once per test binary.
func tinyBundle(t testing.TB, opts llama.Options) *bundle.Bundle {
	t.Helper()
	cfg, src, err := llama.Preset("tiny-test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := build.BuildDecoder(context.Background(), t.TempDir(), build.DecoderSpec{
		Name: "tiny-test", Version: "1", Config: cfg, Weights: src, Options: opts, CreatedBy: "llm test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadTiny(t testing.TB, opts Options) *Model {
	t.Helper()
	orttest.Need(t)
	opts.Session.IntraOpThreads = 1
	m, err := Load(context.Background(), tinyBundle(t, llama.Options{}), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func prompt(n int, vocab int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*37 + 11) % vocab)
	}
	return p
}

func collect(t *testing.T, m *Model, p []int32, opts GenerateOptions) []int32 {
	t.Helper()
	var out []int32
	for tok, err := range m.Generate(context.Background(), p, opts) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tok)
	}
	return out
}

// Greedy decoding through the KV cache must pick the same tokens as
// recomputing the whole sequence at every step, and the logits must agree.
func TestCachedDecodeEqualsRecompute(t *testing.T) {
	m := loadTiny(t, Options{KV: kvcache.Options{DisablePrefixCache: true}})
	p := prompt(40, m.Geometry().Vocab)
	got := collect(t, m, p, GenerateOptions{MaxTokens: 16})
	if len(got) != 16 {
		t.Fatalf("generated %d tokens, want 16", len(got))
	}
	seq := append([]int32(nil), p...)
	for i, tok := range got {
		// full recompute: prefill everything in one chunk
		var want int32 = -1
		for w, err := range m.Generate(context.Background(), seq, GenerateOptions{MaxTokens: 1}) {
			if err != nil {
				t.Fatal(err)
			}
			want = w
		}
		if tok != want {
			t.Fatalf("step %d: cached decode chose %d, recompute chose %d", i, tok, want)
		}
		seq = append(seq, tok)
	}
}

// A ragged batch of 4 decoded together equals each sequence alone.
func TestRaggedBatchEqualsAlone(t *testing.T) {
	m := loadTiny(t, Options{KV: kvcache.Options{DisablePrefixCache: true}})
	V := m.Geometry().Vocab
	lens := []int{5, 17, 33, 9}
	alone := make([][]int32, len(lens))
	for i, n := range lens {
		alone[i] = collect(t, m, prompt(n+i, V)[i:], GenerateOptions{MaxTokens: 8})
	}
	ctx := context.Background()
	var res sched.StepResult
	last := make([]int32, len(lens))
	for i, n := range lens {
		p := prompt(n+i, V)[i:]
		id := sched.SeqID(i + 1)
		if _, err := m.Admit(ctx, sched.Sequence{ID: id, Tokens: p, PromptLen: len(p)}); err != nil {
			t.Fatal(err)
		}
		defer m.Release(id)
		res.Tokens = res.Tokens[:0]
		if err := m.prefill(ctx, &sched.PrefillChunk{Seq: id, Tokens: p, Pos: 0, Last: true}, &res); err != nil {
			t.Fatal(err)
		}
		last[i] = res.Tokens[0].Token
	}
	got := make([][]int32, len(lens))
	p0 := m.Phases()
	for step := range 8 {
		rows := make([]sched.DecodeRow, len(lens))
		for i := range lens {
			got[i] = append(got[i], last[i])
			if err := m.Extend(sched.SeqID(i+1), 1); err != nil {
				t.Fatal(err)
			}
			rows[i] = sched.DecodeRow{Seq: sched.SeqID(i + 1), Token: last[i], Pos: m.seqs[uint64(i+1)].kv.Computed()}
		}
		if step == 7 {
			break
		}
		r, err := m.Step(ctx, &sched.Batch{Decode: rows})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range r.Tokens {
			last[s.Seq-1] = s.Token
		}
	}
	for i := range lens {
		for j := range alone[i] {
			if got[i][j] != alone[i][j] {
				t.Fatalf("row %d token %d: batched %v, alone %v", i, j, got[i], alone[i])
			}
		}
	}
	// the seven steps are counted under four rows (DecodePhases.ByRows)
	if p := m.Phases(); rowSteps(p, 4)-rowSteps(p0, 4) != 7 || rowSteps(p, 1) != rowSteps(p0, 1) {
		t.Errorf("ByRows %+v after %+v: want 7 more steps of 4 rows and none of 1", p.ByRows, p0.ByRows)
	}
}

func TestScoreMatchesGenerateLogits(t *testing.T) {
	m := loadTiny(t, Options{})
	p := prompt(20, m.Geometry().Vocab)
	nll, n, err := m.Score(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(p)-1 || math.IsNaN(nll) || nll <= 0 {
		t.Fatalf("score: nll %v over %d tokens", nll, n)
	}
	// random weights: perplexity should be near the vocabulary size, not 1 or inf
	ppl := math.Exp(nll / float64(n))
	if ppl < 2 || ppl > float64(10*m.Geometry().Vocab) {
		t.Fatalf("perplexity %v implausible for a random tiny model", ppl)
	}
}

func TestPromptTooLongAndCancel(t *testing.T) {
	m := loadTiny(t, Options{})
	long := prompt(m.Geometry().MaxPositions, m.Geometry().Vocab)
	for _, err := range m.Generate(context.Background(), long, GenerateOptions{}) {
		if err == nil {
			t.Fatal("a prompt as long as the context was accepted")
		}
		break
	}
	free := m.Cache().FreeBlocks()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	for _, err := range m.Generate(ctx, prompt(30, m.Geometry().Vocab), GenerateOptions{MaxTokens: 100}) {
		if err != nil {
			break
		}
		if n++; n == 3 {
			cancel()
		}
	}
	if got := m.Cache().Stats(); m.Cache().FreeBlocks() != free {
		t.Fatalf("cancelled generation leaked KV blocks: free %d, was %d (%+v)", m.Cache().FreeBlocks(), free, got)
	}
}

// The same weights built in the compatible (Optimum) contract and run by
// the compatible executor give the same logits and tokens as the paged one.
func TestCompatibleContractMatchesPaged(t *testing.T) {
	orttest.Need(t)
	paged := loadTiny(t, Options{KV: kvcache.Options{DisablePrefixCache: true}})
	cm, err := Load(context.Background(), tinyBundle(t, llama.Options{Contract: llama.ContractCompatible}), Options{Session: ort.Options{IntraOpThreads: 1}, KV: kvcache.Options{DisablePrefixCache: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	if !cm.compat {
		t.Fatal("compatible bundle loaded as paged")
	}
	p := prompt(64, paged.Geometry().Vocab)
	a := collect(t, paged, p, GenerateOptions{MaxTokens: 32})
	b := collect(t, cm, p, GenerateOptions{MaxTokens: 32})
	if len(a) != 32 || len(b) != 32 {
		t.Fatalf("lengths %d, %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("token %d: paged %v, compatible %v", i, a, b)
		}
	}
	// logits: score the same text on both
	na, _, err := paged.Score(context.Background(), p[:24])
	if err != nil {
		t.Fatal(err)
	}
	nb, _, err := cm.Score(context.Background(), p[:24])
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(na-nb) > 1e-3 {
		t.Fatalf("summed NLL paged %v, compatible %v", na, nb)
	}
	// a ragged decode batch through the compatible executor
	ctx := context.Background()
	for i := range 3 {
		q := prompt(10+9*i, paged.Geometry().Vocab)
		var res sched.StepResult
		for _, mod := range []*Model{paged, cm} {
			id := sched.SeqID(100 + i)
			if _, err := mod.Admit(ctx, sched.Sequence{ID: id, Tokens: q, PromptLen: len(q)}); err != nil {
				t.Fatal(err)
			}
			res.Tokens = res.Tokens[:0]
			if err := mod.prefill(ctx, &sched.PrefillChunk{Seq: id, Tokens: q, Last: true}, &res); err != nil {
				t.Fatal(err)
			}
		}
		if res.Tokens[0].Token != paged.seqs[uint64(100+i)].kv.Tokens()[len(q)] {
			t.Fatalf("prefill %d: compatible sampled %d", i, res.Tokens[0].Token)
		}
	}
	for step := range 4 {
		var got [2][]int32
		for k, mod := range []*Model{paged, cm} {
			rows := make([]sched.DecodeRow, 3)
			for i := range 3 {
				id := sched.SeqID(100 + i)
				if err := mod.Extend(id, 1); err != nil {
					t.Fatal(err)
				}
				kv := mod.seqs[uint64(id)].kv
				rows[i] = sched.DecodeRow{Seq: id, Token: kv.Tokens()[kv.Computed()], Pos: kv.Computed()}
			}
			r, err := mod.Step(ctx, &sched.Batch{Decode: rows})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range r.Tokens {
				got[k] = append(got[k], s.Token)
			}
		}
		for i := range got[0] {
			if got[0][i] != got[1][i] {
				t.Fatalf("ragged step %d: paged %v, compatible %v", step, got[0], got[1])
			}
		}
	}
}

// A graph that writes the pools itself (llama.Options' default) and one
// that returns new_keys/new_values for the step to scatter (CallerScatters,
// the form of bundles built before graph revision 11) generate the same
// tokens and leave the same bytes in every pool, float32 and float16:
// prefill chunks, decode steps and a batch of rows in between.
func TestGraphWritesPoolsAsScatter(t *testing.T) {
	orttest.Need(t)
	for _, f16 := range []bool{false, true} {
		t.Run(fmt.Sprintf("float16 %v", f16), func(t *testing.T) {
			var models [2]*Model
			for i, caller := range []bool{false, true} {
				m, err := Load(context.Background(), tinyBundle(t, llama.Options{KVFloat16: f16, CallerScatters: caller}),
					Options{Session: ort.Options{IntraOpThreads: 2}, KV: kvcache.Options{DisablePrefixCache: true}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = m.Close() })
				if m.writesKV == caller {
					t.Fatalf("CallerScatters %v: the model's writesKV is %v", caller, m.writesKV)
				}
				models[i] = m
			}
			V := models[0].Geometry().Vocab
			var tokens [2][]int32
			for i, m := range models {
				for n := range 3 {
					tokens[i] = append(tokens[i], collect(t, m, prompt(23+9*n, V)[n:], GenerateOptions{MaxTokens: 12})...)
				}
				tokens[i] = append(tokens[i], decodeTogether(t, m, [][]int32{prompt(14, V), prompt(30, V)[5:], prompt(9, V)[2:]}, 6)...)
			}
			if !slices.Equal(tokens[0], tokens[1]) {
				t.Fatalf("tokens: the graph writing the pools %v, the step scattering %v", tokens[0], tokens[1])
			}
			c0, c1 := models[0].Cache(), models[1].Cache()
			for l := range models[0].Geometry().Layers {
				for _, pools := range [][2][]byte{{c0.KeyPoolBytes(l), c1.KeyPoolBytes(l)}, {c0.ValuePoolBytes(l), c1.ValuePoolBytes(l)}} {
					if !bytes.Equal(pools[0], pools[1]) {
						i := 0
						for pools[0][i] == pools[1][i] {
							i++
						}
						t.Fatalf("layer %d: the pools differ first at byte %d of %d", l, i, len(pools[0]))
					}
				}
			}
		})
	}
}

// decodeTogether prefills each prompt alone, then decodes them as one batch
// for steps steps, and returns the tokens each step chose, row after row;
// the sequences stay admitted (their blocks in the pools) until t ends.
func decodeTogether(t *testing.T, m *Model, prompts [][]int32, steps int) []int32 {
	t.Helper()
	return decodeTogetherEach(t, m, prompts, steps, nil)
}

// decodeTogetherEach is decodeTogether calling each, when set, with every
// prefill's and step's sampled tokens while its logits are still the
// model's (what: "prefill" or "decode step").
func decodeTogetherEach(t *testing.T, m *Model, prompts [][]int32, steps int, each func(what string, got []sched.Sampled)) []int32 {
	t.Helper()
	ctx := context.Background()
	var res sched.StepResult
	var out []int32
	last := make([]int32, len(prompts))
	for i, p := range prompts {
		id := sched.SeqID(1000 + i)
		if _, err := m.Admit(ctx, sched.Sequence{ID: id, Tokens: p, PromptLen: len(p)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Release(id) })
		res.Tokens = res.Tokens[:0]
		if err := m.prefill(ctx, &sched.PrefillChunk{Seq: id, Tokens: p, Pos: 0, Last: true}, &res); err != nil {
			t.Fatal(err)
		}
		if each != nil {
			each("prefill", res.Tokens)
		}
		last[i] = res.Tokens[0].Token
	}
	for range steps {
		rows := make([]sched.DecodeRow, len(prompts))
		for i := range prompts {
			id := sched.SeqID(1000 + i)
			out = append(out, last[i])
			if err := m.Extend(id, 1); err != nil {
				t.Fatal(err)
			}
			rows[i] = sched.DecodeRow{Seq: id, Token: last[i], Pos: m.seqs[uint64(id)].kv.Computed()}
		}
		r, err := m.Step(ctx, &sched.Batch{Decode: rows})
		if err != nil {
			t.Fatal(err)
		}
		if each != nil {
			each("decode step", r.Tokens)
		}
		for _, s := range r.Tokens {
			last[s.Seq-1000] = s.Token
		}
	}
	return out
}
