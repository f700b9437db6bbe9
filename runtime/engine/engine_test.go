package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/sched"
)

func buildPreset(t testing.TB, preset string) string {
	t.Helper()
	cfg, src, err := llama.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := bundle.BuildDecoder(context.Background(), dir, bundle.DecoderSpec{
		Name: preset, Version: "1", Config: cfg, Weights: src, CreatedBy: "engine test",
	}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func openTiny(t *testing.T, cfg Config) *Engine {
	t.Helper()
	orttest.Need(t)
	cfg.Models = []ModelSpec{{Dir: buildPreset(t, "tiny-test")}}
	cfg.Session.IntraOpThreads = 1
	e, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
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
	for tok, err := range e.GenerateTokens(context.Background(), "tiny-test", p, opts) {
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
	e := openTiny(t, Config{Sched: sched.Config{ChunkSize: 16}})
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
	recs := e.Records()
	if len(recs) != 2*n {
		t.Fatalf("%d records, want %d", len(recs), 2*n)
	}
	for _, r := range recs {
		if r.Outcome != sched.OutcomeCompleted || r.OutputTokens() != 12 {
			t.Fatalf("record %+v", r)
		}
	}
}

// A KV cache too small for every stream forces preemption; greedy output
// must not change.
func TestPreemptionKeepsGreedyOutput(t *testing.T) {
	e := openTiny(t, Config{KVBudgetBytes: 0, Sched: sched.Config{ChunkSize: 32}})
	kv := e.Stats().KV["tiny-test"]
	_ = kv
	const n = 4
	alone := make([][]int32, n)
	for i := range n {
		alone[i] = run(t, e, ids(40, i), GenerateOptions{MaxTokens: 40})
	}
	// reopen with a cache that holds about two of the four sequences
	small := openTinyBudget(t, 2*blockBytes(e)*((40+40)/16+1))
	got := make([][]int32, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i] = run(t, small, ids(40, i), GenerateOptions{MaxTokens: 40}) })
	}
	wg.Wait()
	for i := range n {
		if !equal(got[i], alone[i]) {
			t.Fatalf("stream %d changed under preemption:\n got %v\nwant %v", i, got[i], alone[i])
		}
	}
	if p := small.Stats().Sched.Preemptions; p == 0 {
		t.Fatalf("no preemption happened; the test did not exercise it")
	}
}

func blockBytes(e *Engine) int64 {
	for _, m := range e.Models() {
		if m.KV != nil {
			return m.KV.BlockBytes()
		}
	}
	return 0
}

func openTinyBudget(t *testing.T, budget int64) *Engine {
	t.Helper()
	cfg := Config{KVBudgetBytes: budget, DisablePrefixCache: true, Sched: sched.Config{ChunkSize: 32, AdmitReserve: 1}}
	return openTiny(t, cfg)
}

func TestCancelFreesKV(t *testing.T) {
	e := openTiny(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	for _, err := range e.GenerateTokens(ctx, "tiny-test", ids(30, 1), GenerateOptions{MaxTokens: 200}) {
		if err != nil {
			break
		}
		if n++; n == 3 {
			cancel()
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for e.Stats().Sched.Running > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if kv := e.Stats().KV["tiny-test"]; kv.BlocksUsed != 0 {
		t.Fatalf("cancelled request still holds %d blocks", kv.BlocksUsed)
	}
}

func TestBadRequests(t *testing.T) {
	e := openTiny(t, Config{})
	for _, err := range e.GenerateTokens(context.Background(), "nope", ids(3, 0), GenerateOptions{}) {
		if !errors.Is(err, ErrUnknownModel) {
			t.Fatalf("unknown model: %v", err)
		}
	}
	for _, err := range e.Generate(context.Background(), "tiny-test", "hi", GenerateOptions{}) {
		if !errors.Is(err, ErrNoTokenizer) {
			t.Fatalf("no tokenizer: %v", err)
		}
	}
	if _, err := Open(context.Background(), Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("empty config: %v", err)
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
		for _, err := range e.GenerateTokens(context.Background(), "tiny-test", ids(10, 0), GenerateOptions{MaxTokens: 4}) {
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
	e := openTiny(t, Config{})
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
