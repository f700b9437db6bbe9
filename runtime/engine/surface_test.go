package engine

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

// Every generation ends with a summary that says why: max tokens, the end
// of the context, a stop string, the caller leaving — and the record the
// observers get says the same.
func TestSummaryFinishReasons(t *testing.T) {
	e, snk := openTiny(t, Config{})
	ctx := context.Background()

	s := e.GenerateTokens(ctx, "tiny-test", ids(20, 1), GenerateOptions{MaxTokens: 5, ID: "req-1"})
	n := 0
	for _, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	sum := s.Summary()
	if sum.Finish != FinishLength || sum.OutputTokens != 5 || n != 5 || sum.ID != "req-1" || sum.PromptTokens != 20 ||
		sum.Model != "tiny-test" || sum.Version != "1" || sum.TTFT <= 0 || sum.TPOT <= 0 || sum.Err != nil {
		t.Fatalf("max tokens: %d yielded, summary %+v", n, sum)
	}

	// A prompt that leaves 3 positions of the 512-position context: the
	// reply is cut at the context, not reported complete.
	s = e.GenerateTokens(ctx, "tiny-test", ids(509, 2), GenerateOptions{})
	for _, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
	}
	if sum := s.Summary(); sum.Finish != FinishContextLength && sum.Finish != FinishStop {
		t.Fatalf("context end: summary %+v, want context_length (or an end token)", sum)
	} else if sum.Finish == FinishContextLength && sum.PromptTokens+sum.OutputTokens > 512 {
		t.Fatalf("context end: %d + %d tokens exceed the context", sum.PromptTokens, sum.OutputTokens)
	}

	// Leaving the loop cancels; Summary waits for the scheduler to let go.
	// The tiny model decodes a token in ~70 µs, so a reader that a loaded
	// host leaves unscheduled for a few milliseconds may find the reply
	// already over when its break arrives (CI saw 100 tokens in 7.7 ms):
	// the reply runs to the context's end (~490 tokens), and a reply that
	// still ended on its own must have done so completely.
	s = e.GenerateTokens(ctx, "tiny-test", ids(20, 3), GenerateOptions{})
	for range s.Tokens() {
		break
	}
	sum = s.Summary()
	switch {
	case sum.Finish == FinishCancelled && sum.OutputTokens >= 1:
	case (sum.Finish == FinishContextLength || sum.Finish == FinishStop) && sum.Err == nil:
		t.Logf("break: the reply ended (%s, %d tokens) before the cancellation reached the scheduler", sum.Finish, sum.OutputTokens)
	default:
		t.Fatalf("break: summary %+v", sum)
	}
	if kv := e.Stats().KV["tiny-test"]; kv.BlocksUsed != 0 {
		t.Fatalf("cancelled request holds %d blocks", kv.BlocksUsed)
	}

	recs := snk.take(t, 3)
	want := []string{"length", "", sum.Finish.String()}
	for i, r := range recs[:3] {
		if r.Model != "tiny-test" || r.Kind != "generate" || (want[i] != "" && r.FinishReason != want[i]) {
			t.Errorf("record %d: model %q kind %q finish %q, want %q", i, r.Model, r.Kind, r.FinishReason, want[i])
		}
	}
}

// Two observers both see every record: records are observed, not drained.
func TestObserversShareRecords(t *testing.T) {
	e, first := openTiny(t, Config{})
	second := &sink{}
	remove := e.Observe(second)
	run(t, e, ids(10, 0), GenerateOptions{MaxTokens: 3})
	run(t, e, ids(10, 1), GenerateOptions{MaxTokens: 3})
	a, b := first.take(t, 2), second.take(t, 2)
	if len(a) != 2 || len(b) != 2 || a[0] != b[0] {
		t.Fatalf("observers got %d and %d records", len(a), len(b))
	}
	remove()
	run(t, e, ids(10, 2), GenerateOptions{MaxTokens: 3})
	// records go to the observers in the order they were added, one after
	// the other: once an observer added after second has the record, second
	// would have had it too
	later := &sink{}
	e.Observe(later)
	run(t, e, ids(10, 3), GenerateOptions{MaxTokens: 3})
	first.take(t, 2)
	later.take(t, 1)
	second.mu.Lock()
	defer second.mu.Unlock()
	if len(second.recs) != 0 {
		t.Fatalf("a removed observer got %d records", len(second.recs))
	}
}

// After Close every call fails with ErrClosed, and Close is idempotent.
func TestClosed(t *testing.T) {
	e, _ := openTiny(t, Config{})
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatalf("second close: %v", err)
	}
	for _, err := range e.GenerateTokens(context.Background(), "tiny-test", ids(5, 0), GenerateOptions{}).Tokens() {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("generate after close: %v", err)
		}
	}
	if _, err := e.Infer(context.Background(), "tiny-test", nil, InferOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("infer after close: %v", err)
	}
	if _, err := e.Load(context.Background(), ModelSpec{Dir: tinyBundle(t), Name: "again"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("load after close: %v", err)
	}
}

// The bundle's generation defaults apply when the caller leaves sampling
// unset, and &Sampling{} overrides them with greedy decoding.
func TestSamplingDefaults(t *testing.T) {
	g, err := samplingFor(nil, bundleGen(0.7, 40))
	if err != nil || g.Temperature != 0.7 || g.TopK != 40 {
		t.Fatalf("defaults: %+v %v", g, err)
	}
	g, err = samplingFor(&Sampling{}, bundleGen(0.7, 40))
	if err != nil || g.Temperature != 0 || g.TopK != 0 {
		t.Fatalf("override: %+v %v", g, err)
	}
	if _, err := samplingFor(&Sampling{Temperature: -1}, bundleGen(0, 0)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("bad sampling: %v", err)
	}
}

// A swap while a stream runs: the stream finishes on the old version
// without an error, later requests run on the new one, and a failed health
// check leaves the old version active.
func TestSwapUnderLoad(t *testing.T) {
	e, snk := openTiny(t, Config{})
	ctx := context.Background()
	started := make(chan struct{})
	var wg sync.WaitGroup
	var sum Summary
	var streamErr error
	wg.Go(func() {
		s := e.GenerateTokens(ctx, "tiny-test", ids(20, 5), GenerateOptions{MaxTokens: 200})
		n := 0
		for _, err := range s.Tokens() {
			if err != nil {
				streamErr = err
				return
			}
			if n++; n == 2 {
				close(started)
			}
		}
		sum = s.Summary()
	})
	<-started
	boom := errors.New("golden output differs")
	if _, err := e.Swap(ctx, "tiny-test", ModelSpec{Dir: tinyBundle(t)}, func(context.Context, *Engine, string) error { return boom }); !errors.Is(err, ErrHealthCheck) || !errors.Is(err, boom) {
		t.Fatalf("failed check: %v", err)
	}
	checked := false
	info, err := e.Swap(ctx, "tiny-test", ModelSpec{Dir: tinyBundle(t)}, func(ctx context.Context, e *Engine, staged string) error {
		checked = true
		for _, err := range e.GenerateTokens(ctx, staged, ids(8, 0), GenerateOptions{MaxTokens: 2}).Tokens() {
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || !checked || info.Name != "tiny-test" {
		t.Fatalf("swap: %+v %v (checked %v)", info, err, checked)
	}
	wg.Wait()
	if streamErr != nil || sum.Finish != FinishLength || sum.OutputTokens != 200 {
		t.Fatalf("stream across the swap: %v, %+v", streamErr, sum)
	}
	run(t, e, ids(10, 9), GenerateOptions{MaxTokens: 3})
	for _, r := range snk.take(t, 3) { // the check's request, the long stream, the one after
		if r.Model != "tiny-test" || r.Outcome != metrics.Completed {
			t.Fatalf("record %+v", r)
		}
	}
	if err := e.Unload(ctx, "tiny-test"); err != nil {
		t.Fatal(err)
	}
	for _, err := range e.GenerateTokens(ctx, "tiny-test", ids(5, 0), GenerateOptions{}).Tokens() {
		if !errors.Is(err, ErrUnknownModel) {
			t.Fatalf("after unload: %v", err)
		}
	}
}
