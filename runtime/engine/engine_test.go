package engine

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

func buildPreset(t testing.TB, preset string) string {
	t.Helper()
	cfg, src, err := llama.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := build.BuildDecoder(context.Background(), dir, build.DecoderSpec{
		Name: preset, Version: "1", Config: cfg, Weights: src, CreatedBy: "engine test",
	}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tinyDir is one tiny-test bundle per test binary: building it is the
// slow part of opening an engine. TestMain removes it (tinyPath).
var tinyDir = sync.OnceValues(func() (string, error) {
	cfg, src, err := llama.Preset("tiny-test")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "engine-tiny-")
	if err != nil {
		return "", err
	}
	tinyPath = dir
	_, err = build.BuildDecoder(context.Background(), dir, build.DecoderSpec{
		Name: "tiny-test", Version: "1", Config: cfg, Weights: src, CreatedBy: "engine test",
	})
	return dir, err
})

// tinyPath is tinyDir's directory once built.
var tinyPath string

func tinyBundle(t testing.TB) string {
	t.Helper()
	orttest.Need(t)
	dir, err := tinyDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// openTiny opens an engine on the tiny-test decoder with a sink observer.
func openTiny(t *testing.T, cfg Config) (*Engine, *sink) {
	t.Helper()
	cfg.Models = []ModelSpec{{Dir: tinyBundle(t)}}
	cfg.Session.IntraOpThreads = 1
	snk := &sink{}
	cfg.Observers = append(cfg.Observers, snk)
	e, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e, snk
}

func ids(n, off int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*31 + off) % 200)
	}
	return p
}

func run(t *testing.T, e *Engine, p []int32, opts GenerateOptions) []int32 {
	t.Helper()
	var out []int32
	for tok, err := range e.GenerateTokens(context.Background(), "tiny-test", p, opts).Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tok.ID)
	}
	return out
}

// Concurrent streams batched by the scheduler give exactly the tokens each
// gives alone (greedy), and every request is recorded.
func TestConcurrentEqualsAlone(t *testing.T) {
	e, snk := openTiny(t, Config{Scheduler: SchedulerConfig{ChunkSize: 16}})
	const n = 6
	alone := make([][]int32, n)
	for i := range n {
		alone[i] = run(t, e, ids(20+7*i, i), GenerateOptions{MaxTokens: 12})
	}
	got := make([][]int32, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i] = run(t, e, ids(20+7*i, i), GenerateOptions{MaxTokens: 12}) })
	}
	wg.Wait()
	for i := range n {
		if len(got[i]) != 12 || !equal(got[i], alone[i]) {
			t.Fatalf("stream %d: concurrent %v, alone %v", i, got[i], alone[i])
		}
	}
	recs := snk.take(t, 2*n)
	if len(recs) != 2*n {
		t.Fatalf("%d records, want %d", len(recs), 2*n)
	}
	for _, r := range recs {
		if r.Outcome != metrics.Completed || r.OutputTokens != 12 || r.Model != "tiny-test" || r.FinishReason != "length" {
			t.Fatalf("record %+v", r)
		}
	}
}

// A KV cache too small for every stream forces preemption; greedy output
// must not change.
func TestPreemptionKeepsGreedyOutput(t *testing.T) {
	e, _ := openTiny(t, Config{Scheduler: SchedulerConfig{ChunkSize: 32}})
	const n = 4
	alone := make([][]int32, n)
	for i := range n {
		alone[i] = run(t, e, ids(40, i), GenerateOptions{MaxTokens: 40})
	}
	// reopen with a cache that holds about two of the four sequences
	small := openTinyBudget(t, 2*blockBytes(e)*((40+40)/16+1))
	// The streams must overlap for the cache to run out, which a loaded
	// machine does not always arrange (one stream can finish before the
	// last starts): released together, up to five tries, each checked.
	for try := 1; small.Stats().Scheduler.Preemptions == 0; try++ {
		if try > 5 {
			t.Fatalf("no preemption happened in %d tries; the test did not exercise it", try-1)
		}
		got := make([][]int32, n)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-gate
				got[i] = run(t, small, ids(40, i), GenerateOptions{MaxTokens: 40})
			})
		}
		close(gate)
		wg.Wait()
		for i := range n {
			if !equal(got[i], alone[i]) {
				t.Fatalf("stream %d changed under preemption:\n got %v\nwant %v", i, got[i], alone[i])
			}
		}
	}
}

func blockBytes(e *Engine) int64 {
	for _, m := range e.Models() {
		if m.KV != nil {
			return m.KV.BytesPerToken * int64(m.KV.BlockSize)
		}
	}
	return 0
}

func openTinyBudget(t *testing.T, budget int64) *Engine {
	t.Helper()
	cfg := Config{KV: KVOptions{BudgetBytes: budget, DisablePrefixCache: true}, Scheduler: SchedulerConfig{ChunkSize: 32, AdmitReserve: 1}}
	e, _ := openTiny(t, cfg)
	return e
}

func TestCancelFreesKV(t *testing.T) {
	e, _ := openTiny(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	s := e.GenerateTokens(ctx, "tiny-test", ids(30, 1), GenerateOptions{MaxTokens: 200})
	for _, err := range s.Tokens() {
		if err != nil {
			break
		}
		if n++; n == 3 {
			cancel()
		}
	}
	// Summary waits until the scheduler let the request go.
	if sum := s.Summary(); sum.Finish != FinishCancelled || !errors.Is(sum.Err, ErrCancelled) {
		t.Fatalf("summary %+v, want cancelled", sum)
	}
	if kv := e.Stats().KV["tiny-test"]; kv.BlocksUsed != 0 {
		t.Fatalf("cancelled request still holds %d blocks", kv.BlocksUsed)
	}
}

func TestBadRequests(t *testing.T) {
	e, _ := openTiny(t, Config{})
	for _, c := range []struct {
		name string
		s    *Stream
		want error
	}{
		{"unknown model", e.GenerateTokens(context.Background(), "nope", ids(3, 0), GenerateOptions{}), ErrUnknownModel},
		{"no tokenizer", e.Generate(context.Background(), "tiny-test", "hi", GenerateOptions{}), ErrNoTokenizer},
		{"bad sampling", e.GenerateTokens(context.Background(), "tiny-test", ids(3, 0), GenerateOptions{Sampling: &Sampling{TopP: 2}}), ErrInvalidRequest},
		{"bad class", e.GenerateTokens(context.Background(), "tiny-test", ids(3, 0), GenerateOptions{Class: 9}), ErrInvalidRequest},
		{"prompt too long", e.GenerateTokens(context.Background(), "tiny-test", ids(5000, 0), GenerateOptions{}), ErrPromptTooLong},
	} {
		n := 0
		for _, err := range c.s.Tokens() {
			n++
			if !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}
		if sum := c.s.Summary(); n != 1 || !errors.Is(sum.Err, c.want) || (sum.Finish != FinishRejected && sum.Finish != FinishError) {
			t.Errorf("%s: %d yields, summary %+v", c.name, n, sum)
		}
	}
	if _, err := Open(context.Background(), Config{Models: []ModelSpec{{}}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("model without dir or ref: %v", err)
	}
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Models are opened by name from the offline store; nothing touches the
// network.
func TestOpenFromStore(t *testing.T) {
	orttest.Need(t)
	dir := buildPreset(t, "tiny-test")
	path := t.TempDir() + "/models.db"
	st, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := st.Import(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"tiny-test", ref.String()} {
		e, err := Open(context.Background(), Config{Store: path, Models: []ModelSpec{{Ref: r}}, Session: ort.Options{IntraOpThreads: 1}})
		if err != nil {
			t.Fatalf("open %s: %v", r, err)
		}
		n := 0
		for _, err := range e.GenerateTokens(context.Background(), "tiny-test", ids(10, 0), GenerateOptions{MaxTokens: 4}).Tokens() {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != 4 {
			t.Fatalf("%s: %d tokens", r, n)
		}
		if err := e.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(context.Background(), Config{Store: path, Models: []ModelSpec{{Ref: "absent"}}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("absent model: %v", err)
	}
}

// TestModelInfoAttention: the version matrix learns from the graph's
// metadata that the decoder computes attention with edgeinfer's kernel.
func TestModelInfoAttention(t *testing.T) {
	e, _ := openTiny(t, Config{})
	decoders := 0
	for _, m := range e.Models() {
		if m.Kind != "decoder" {
			continue
		}
		decoders++
		if m.Attention != llama.AttentionKernel {
			t.Errorf("model %s: attention %q, want %s", m.Name, m.Attention, llama.AttentionKernel)
		}
	}
	if decoders == 0 {
		t.Fatal("no decoder among the engine's models")
	}
}
