package sched

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

const testBlocks, testBlockSize = 256, 16

func prompt(n int, seed int32) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = seed*1000 + int32(i%1000) + 1
	}
	return p
}

// newTest starts a scheduler on f and closes it at the end of the test,
// checking the executor contract and that every KV block came back.
func newTest(t *testing.T, f *fakeExec, total int, cfg Config) *Scheduler[any] {
	t.Helper()
	s, err := New[any](f, f, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		for _, e := range f.check(total) {
			t.Error(e)
		}
	})
	return s
}

// result is what a consumer goroutine saw of a stream.
type result struct {
	tokens []int32
	times  []time.Time
	err    error
	tl     Timeline
}

// consume reads a stream to its end in its own goroutine.
func consume(wg *sync.WaitGroup, st *Stream, out *result) {
	wg.Go(func() {
		for tok, err := range st.Tokens() {
			if err != nil {
				out.err = err
				break
			}
			out.tokens = append(out.tokens, tok.ID)
			out.times = append(out.times, tok.Time)
		}
		<-st.Done()
		out.tl = st.Timeline()
	})
}

func submit(t *testing.T, s *Scheduler[any], ctx context.Context, req Request) *Stream {
	t.Helper()
	st, err := s.Submit(ctx, req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return st
}

func maxGap(ts []time.Time) time.Duration {
	var m time.Duration
	for i := 1; i < len(ts); i++ {
		m = max(m, ts[i].Sub(ts[i-1]))
	}
	return m
}

func TestGenerateMatchesReference(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(testBlocks, testBlockSize)
		s := newTest(t, f, testBlocks, Config{})
		var wg sync.WaitGroup
		res := make([]result, 5)
		for i := range res {
			consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(10+40*i, int32(i)), MaxTokens: 20}), &res[i])
		}
		wg.Wait()
		for i, r := range res {
			if r.err != nil {
				t.Fatalf("%d: %v", i, r.err)
			}
			if want := reference(prompt(10+40*i, int32(i)), 20); !slices.Equal(r.tokens, want) {
				t.Errorf("%d: tokens %v, want %v", i, r.tokens, want)
			}
			tl := r.tl
			if tl.Outcome != OutcomeCompleted || tl.OutputTokens() != 20 || tl.Arrived.IsZero() || tl.Admitted.Before(tl.Arrived) ||
				tl.FirstScheduled.Before(tl.Admitted) || tl.FirstToken.Before(tl.FirstScheduled) || tl.Finished.Before(tl.FirstToken) {
				t.Errorf("%d: timeline out of order: %+v", i, tl)
			}
		}
		if st := s.Stats(); st.Completed != 5 || st.DecodeTokens == 0 || st.Steps == 0 || st.HandOffs != 5*20 {
			t.Errorf("stats %+v (want 100 hand-offs: one a streamed token)", st)
		}
		if recs := s.Records(); len(recs) != 5 {
			t.Errorf("%d records, want 5", len(recs))
		}
	})
}

// TestHandOffTimed: on the real clock the loop's time handing tokens to
// their streams is counted, and is part of its time outside the executor.
func TestHandOffTimed(t *testing.T) {
	f := newFake(testBlocks, testBlockSize)
	s := newTest(t, f, testBlocks, Config{})
	var wg sync.WaitGroup
	var r result
	consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(8, 1), MaxTokens: 10}), &r)
	wg.Wait()
	if r.err != nil || len(r.tokens) != 10 {
		t.Fatalf("stream: %d tokens, %v", len(r.tokens), r.err)
	}
	st := s.Stats()
	if st.HandOffs != 10 || st.HandOffTime <= 0 || st.HandOffTime > st.LoopTime-st.ExecTime {
		t.Errorf("hand-offs %d in %v, loop %v, executor %v: want 10, in some of the loop's own time",
			st.HandOffs, st.HandOffTime, st.LoopTime, st.ExecTime)
	}
}

func TestStopToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(testBlocks, testBlockSize)
		f.stopAfter = 3
		s := newTest(t, f, testBlocks, Config{})
		var wg sync.WaitGroup
		var r result
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(5, 1)}), &r)
		wg.Wait()
		if r.err != nil || !slices.Equal(r.tokens, reference(prompt(5, 1), 3)) || r.tl.Outcome != OutcomeCompleted {
			t.Fatalf("got %v %v %v", r.tokens, r.err, r.tl.Outcome)
		}
	})
}

// TestOnFinishBeforeTheStreamEnds: whatever the outcome, a request's
// OnFinish has run when its caller sees the stream end, so what it
// releases (the engine's hold on the model) is released for a caller that
// acts on the end (serve's TestKeepAliveField lists the model then).
func TestOnFinishBeforeTheStreamEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(testBlocks, testBlockSize)
		s := newTest(t, f, testBlocks, Config{})
		for _, c := range []struct {
			name   string
			max    int
			cancel bool
		}{{"completed", 5, false}, {"cancelled", 1000, true}} {
			var finished atomic.Bool
			ctx, cancel := context.WithCancel(t.Context())
			st := submit(t, s, ctx, Request{Model: "m", Prompt: prompt(8, 1), MaxTokens: c.max, OnFinish: func() { finished.Store(true) }})
			n := 0
			for _, err := range st.Tokens() {
				if n++; c.cancel && n == 2 {
					cancel()
				}
				if err != nil {
					break
				}
			}
			if !finished.Load() {
				t.Errorf("%s: the token loop ended before OnFinish ran", c.name)
			}
			<-st.Done()
			cancel()
		}
	})
}

// TestPriorityOrder: with one sequence at a time and no preemption, queued
// requests are served realtime, then interactive, then batch, FIFO within a
// class, whatever their arrival order.
func TestPriorityOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(testBlocks, testBlockSize)
		s := newTest(t, f, testBlocks, Config{MaxBatch: 1, NoPriorityPreemption: true})
		var wg sync.WaitGroup
		var first result
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Class: ClassBatch, Prompt: prompt(8, 0), MaxTokens: 10}), &first)
		synctest.Wait() // the first request is running
		classes := []Class{ClassBatch, ClassInteractive, ClassBatch, ClassRealtime, ClassInteractive, ClassRealtime}
		res := make([]result, len(classes))
		for i, c := range classes {
			consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Class: c, Prompt: prompt(8, int32(i+1)), MaxTokens: 3}), &res[i])
		}
		wg.Wait()
		order := []int{3, 5, 1, 4, 0, 2} // realtime FIFO, interactive FIFO, batch FIFO
		for k := 1; k < len(order); k++ {
			a, b := res[order[k-1]].tl, res[order[k]].tl
			if !a.FirstScheduled.Before(b.FirstScheduled) {
				t.Errorf("request %d (%s) scheduled at %v, not before %d (%s) at %v",
					order[k-1], a.Class, a.FirstScheduled, order[k], b.Class, b.FirstScheduled)
			}
		}
	})
}

// TestChunkedPrefillBoundsITL: a 3,000-token prompt arriving beside running
// streams must not push their inter-token latency above one step of at most
// TokenBudget tokens; without chunking it does.
func TestChunkedPrefillBoundsITL(t *testing.T) {
	for _, tc := range []struct {
		name      string
		chunk     int
		wantBound bool
	}{
		{"chunked-128", 128, true},
		{"chunked-256", 256, true},
		{"unchunked", 1 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(1024, testBlockSize)
				cfg := Config{MaxBatch: 4, ChunkSize: tc.chunk}
				s := newTest(t, f, 1024, cfg)
				var wg sync.WaitGroup
				streams := make([]result, 3)
				for i := range streams {
					consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(16, int32(i)), MaxTokens: 120}), &streams[i])
				}
				time.Sleep(20 * time.Millisecond) // the streams are decoding
				var long result
				consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(3000, 9), MaxTokens: 4}), &long)
				wg.Wait()
				// Worst step: 3 decode rows and one chunk, all at the deepest context.
				cfg = s.Config()
				deep := 3000 + 120
				chunk := min(tc.chunk, cfg.TokenBudget-3, 3000)
				bound := f.cost([]int{deep, deep, deep}, [][2]int{{deep - chunk, chunk}})
				var worst time.Duration
				for _, r := range streams {
					if r.err != nil {
						t.Fatal(r.err)
					}
					worst = max(worst, maxGap(r.times))
				}
				if long.err != nil || long.tl.Outcome != OutcomeCompleted {
					t.Fatalf("long prompt: %v", long.err)
				}
				t.Logf("chunk %d: worst ITL %v, one-step bound %v, long TTFT %v", tc.chunk, worst, bound, long.tl.TTFT())
				if tc.wantBound && worst > bound {
					t.Errorf("worst ITL %v exceeds the one-step bound %v", worst, bound)
				}
				if small := f.cost([]int{deep, deep, deep}, [][2]int{{deep - 256, 256}}); !tc.wantBound && worst < 5*small {
					t.Errorf("unchunked worst ITL %v: expected the long prefill to stall the streams (> 5×%v)", worst, small)
				}
			})
		})
	}
}

// TestFailFastOverload: with a backlog of long prompts, a fail-fast request
// whose TTFT SLO cannot be met is refused at once with a retry-after, and
// recorded as rejected; a patient one queues; a full queue refuses.
func TestFailFastOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(4096, testBlockSize)
		s := newTest(t, f, 4096, Config{MaxBatch: 2, ChunkSize: 128, QueueLimit: 6})
		var wg sync.WaitGroup
		// Warm the estimates with one request.
		var warm result
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(512, 0), MaxTokens: 2}), &warm)
		wg.Wait()
		if st := s.Stats(); st.PrefillRate <= 0 {
			t.Fatalf("no prefill rate measured: %+v", st)
		}
		backlog := make([]result, 6)
		for i := range backlog {
			consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(1000, int32(i+1)), MaxTokens: 4}), &backlog[i])
			synctest.Wait() // the loop is inside the first step: 1 runs, 5 wait
		}
		before := time.Now()
		_, err := s.Submit(t.Context(), Request{Model: "m", Prompt: prompt(100, 7), MaxTokens: 4, FailFast: true, SLO: SLO{TTFT: 50 * time.Millisecond}})
		var oe *OverloadError
		if !errors.Is(err, ErrOverloaded) || !errors.As(err, &oe) || oe.QueueFull {
			t.Fatalf("want an SLO *OverloadError, got %v", err)
		}
		if time.Since(before) != 0 {
			t.Errorf("refusal took %v, want at once", time.Since(before))
		}
		if oe.RetryAfter <= 0 || oe.Predicted <= oe.SLO {
			t.Errorf("overload error %+v", oe)
		}
		t.Logf("refused: %v", err)
		// A batch request is in another queue and just waits.
		var patient result
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Class: ClassBatch, Prompt: prompt(100, 9), MaxTokens: 4, SLO: SLO{TTFT: 50 * time.Millisecond}}), &patient)
		// One more fills the interactive queue (limit 6); the next is refused.
		var sixth result
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(10, 10), MaxTokens: 1}), &sixth)
		if q := s.Stats().QueuedIn(ClassInteractive); q != 6 {
			t.Fatalf("%d queued, want 6", q)
		}
		_, err = s.Submit(t.Context(), Request{Model: "m", Class: ClassInteractive, Prompt: prompt(10, 8)})
		if !errors.Is(err, ErrQueueFull) || !errors.Is(err, ErrOverloaded) {
			t.Errorf("full queue: got %v", err)
		}
		// Retrying after 1.5×RetryAfter succeeds: the estimate is usable (it is
		// an EWMA, and attention makes later chunks of long prompts dearer).
		time.Sleep(oe.RetryAfter * 3 / 2)
		var retried result
		st, err := s.Submit(t.Context(), Request{Model: "m", Prompt: prompt(100, 7), MaxTokens: 4, FailFast: true, SLO: SLO{TTFT: 50 * time.Millisecond}})
		if err != nil {
			t.Errorf("retry after %v: %v", oe.RetryAfter, err)
		} else {
			consume(&wg, st, &retried)
		}
		wg.Wait()
		// The refused request's predicted TTFT was honest: the backlog did take that long.
		if patient.err != nil || patient.tl.TTFT() <= 50*time.Millisecond {
			t.Errorf("patient request: %v ttft %v", patient.err, patient.tl.TTFT())
		}
		var rejected int
		for _, r := range s.Records() {
			if r.Outcome == OutcomeRejected {
				rejected++
			}
		}
		if rejected < 1 {
			t.Errorf("no rejected record")
		}
	})
}

// TestQueueTimeout: a request that cannot be admitted times out at its
// deadline (SLO or ctx), with outcome timed out.
func TestQueueTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		slo  time.Duration
		ctx  time.Duration
	}{{"slo-deadline", 30 * time.Millisecond, 0}, {"ctx-deadline", 0, 30 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(testBlocks, testBlockSize)
				s := newTest(t, f, testBlocks, Config{MaxBatch: 1, NoPriorityPreemption: true})
				var wg sync.WaitGroup
				var hog, late result
				consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(8, 1), MaxTokens: 100}), &hog)
				ctx := t.Context()
				if tc.ctx > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.ctx)
					defer cancel()
				}
				start := time.Now()
				consume(&wg, submit(t, s, ctx, Request{Model: "m", Prompt: prompt(8, 2), MaxTokens: 5, SLO: SLO{Deadline: tc.slo}}), &late)
				wg.Wait()
				if !errors.Is(late.err, ErrTimeout) || late.tl.Outcome != OutcomeTimedOut {
					t.Fatalf("late: %v %v", late.err, late.tl.Outcome)
				}
				if waited := late.tl.Finished.Sub(start); waited < 30*time.Millisecond || waited > 30*time.Millisecond+5*time.Millisecond {
					t.Errorf("timed out after %v, want 30ms + at most one step", waited)
				}
				if hog.err != nil {
					t.Errorf("hog: %v", hog.err)
				}
			})
		})
	}
}

// TestCancel: cancelling a running request removes it within one step and
// frees its KV; breaking out of the token loop cancels too.
func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(testBlocks, testBlockSize)
		s := newTest(t, f, testBlocks, Config{})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		var r, other result
		st := submit(t, s, ctx, Request{Model: "m", Prompt: prompt(40, 1), MaxTokens: 1000})
		consume(&wg, st, &r)
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(40, 2), MaxTokens: 50}), &other)
		time.Sleep(20 * time.Millisecond)
		cancel()
		at := time.Now()
		<-st.Done()
		if d := time.Since(at); d > 3*time.Millisecond {
			t.Errorf("cancel took %v, more than one step", d)
		}
		f.mu.Lock()
		released := f.mu.released[st.ID()]
		f.mu.Unlock()
		if released != 1 {
			t.Errorf("kv released %d times", released)
		}
		wg.Wait()
		if !errors.Is(r.err, ErrCancelled) || !errors.Is(r.err, context.Canceled) || r.tl.Outcome != OutcomeCancelled {
			t.Errorf("cancelled stream: %v %v", r.err, r.tl.Outcome)
		}
		if other.err != nil || !slices.Equal(other.tokens, reference(prompt(40, 2), 50)) {
			t.Errorf("neighbour disturbed: %v", other.err)
		}

		// Leaving the range loop early cancels the request.
		st = submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(10, 3), MaxTokens: 1000})
		for _, err := range st.Tokens() {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		<-st.Done()
		if tl := st.Timeline(); tl.Outcome != OutcomeCancelled {
			t.Errorf("break: outcome %v", tl.Outcome)
		}
	})
}

// TestPreemptionResume: a KV cache too small for every stream forces
// preemption mid-decode; preempted sequences are recomputed and their
// output is exactly the unpreempted one.
func TestPreemptionResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const blocks = 24 // 384 tokens for 4 streams that grow to 4×(60+80)=560
		f := newFake(blocks, testBlockSize)
		s := newTest(t, f, blocks, Config{MaxBatch: 4, AdmitReserve: 4})
		var wg sync.WaitGroup
		res := make([]result, 4)
		classes := []Class{ClassInteractive, ClassBatch, ClassInteractive, ClassBatch}
		for i := range res {
			consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Class: classes[i], Prompt: prompt(60, int32(i)), MaxTokens: 80}), &res[i])
		}
		wg.Wait()
		preempted := 0
		for i, r := range res {
			if r.err != nil {
				t.Fatalf("%d: %v", i, r.err)
			}
			if want := reference(prompt(60, int32(i)), 80); !slices.Equal(r.tokens, want) {
				t.Errorf("%d: output changed by preemption", i)
			}
			preempted += r.tl.Preemptions
			if r.tl.Preemptions > 0 && classes[i] != ClassBatch && res[1].tl.Preemptions+res[3].tl.Preemptions == 0 {
				t.Errorf("%d: interactive preempted while batch work was never preempted", i)
			}
		}
		if preempted == 0 || s.Stats().Preemptions != uint64(preempted) {
			t.Errorf("preemptions: timelines %d, stats %d", preempted, s.Stats().Preemptions)
		}
		t.Logf("preemptions %d", preempted)
	})
}

// TestPriorityPreemption: an interactive arrival preempts running batch
// work when the batch is full, and the batch request still completes with
// its exact output.
func TestPriorityPreemption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(testBlocks, testBlockSize)
		s := newTest(t, f, testBlocks, Config{MaxBatch: 1})
		var wg sync.WaitGroup
		var bg, fg result
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Class: ClassBatch, Prompt: prompt(30, 1), MaxTokens: 200}), &bg)
		time.Sleep(30 * time.Millisecond)
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Class: ClassInteractive, Prompt: prompt(30, 2), MaxTokens: 10}), &fg)
		wg.Wait()
		if bg.err != nil || fg.err != nil {
			t.Fatal(bg.err, fg.err)
		}
		if bg.tl.Preemptions != 1 || !fg.tl.Finished.Before(bg.tl.Finished) {
			t.Errorf("batch preemptions %d; interactive finished %v, batch %v", bg.tl.Preemptions, fg.tl.Finished, bg.tl.Finished)
		}
		if fg.tl.TTFT() > 5*time.Millisecond {
			t.Errorf("interactive TTFT %v behind a running batch request", fg.tl.TTFT())
		}
		if !slices.Equal(bg.tokens, reference(prompt(30, 1), 200)) {
			t.Errorf("batch output changed by preemption")
		}
	})
}

// TestPrefixHit: tokens the executor reports cached are not prefilled.
func TestPrefixHit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(testBlocks, testBlockSize)
		p := prompt(100, 1)
		f.prefix = p[:64]
		s := newTest(t, f, testBlocks, Config{})
		var wg sync.WaitGroup
		var r result
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: p, MaxTokens: 5}), &r)
		wg.Wait()
		st := s.Stats()
		if r.err != nil || r.tl.CachedTokens != 64 || st.PrefillTokens != 100-64 || st.CachedTokens != 64 {
			t.Errorf("err %v cached %d, prefilled %d", r.err, r.tl.CachedTokens, st.PrefillTokens)
		}
		if !slices.Equal(r.tokens, reference(p, 5)) {
			t.Errorf("output changed by the prefix hit")
		}
	})
}

// TestStepFailure: an executor error fails the sequences of that step only.
func TestStepFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(testBlocks, testBlockSize)
		f.failStep = 3
		s := newTest(t, f, testBlocks, Config{})
		var wg sync.WaitGroup
		var r, later result
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(10, 1), MaxTokens: 10}), &r)
		wg.Wait()
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(10, 2), MaxTokens: 3}), &later)
		wg.Wait()
		if !errors.Is(r.err, ErrExecutor) || r.tl.Outcome != OutcomeFailed {
			t.Errorf("failed step: %v %v", r.err, r.tl.Outcome)
		}
		if later.err != nil {
			t.Errorf("later request: %v", later.err)
		}
	})
}

// TestNeverFits: a prompt larger than the whole KV cache fails instead of
// waiting forever.
func TestNeverFits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(4, testBlockSize)
		s := newTest(t, f, 4, Config{})
		var wg sync.WaitGroup
		var r result
		consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(100, 1)}), &r)
		wg.Wait()
		if !errors.Is(r.err, ErrNoCapacity) || r.tl.Outcome != OutcomeFailed {
			t.Errorf("got %v %v", r.err, r.tl.Outcome)
		}
	})
}

func TestClose(t *testing.T) {
	t.Run("drain", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake(testBlocks, testBlockSize)
			s, _ := New[any](f, f, Config{}, nil)
			var wg sync.WaitGroup
			var r result
			consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(10, 1), MaxTokens: 30}), &r)
			if err := s.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if r.err != nil || len(r.tokens) != 30 {
				t.Errorf("drained request: %v, %d tokens", r.err, len(r.tokens))
			}
			if _, err := s.Submit(t.Context(), Request{Model: "m", Prompt: prompt(1, 1)}); !errors.Is(err, ErrClosed) {
				t.Errorf("submit after close: %v", err)
			}
			if _, err := s.Infer(t.Context(), InferRequest[any]{Model: "v"}); !errors.Is(err, ErrClosed) {
				t.Errorf("infer after close: %v", err)
			}
			if err := s.Close(t.Context()); err != nil {
				t.Errorf("second close: %v", err)
			}
			for _, e := range f.check(testBlocks) {
				t.Error(e)
			}
		})
	})
	t.Run("cancel", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake(testBlocks, testBlockSize)
			s, _ := New[any](f, f, Config{MaxBatch: 1}, nil)
			var wg sync.WaitGroup
			res := make([]result, 3)
			for i := range res {
				consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(10, int32(i)), MaxTokens: 10000}), &res[i])
			}
			errInfer := make(chan error, 1)
			go func() {
				_, err := s.Infer(t.Context(), InferRequest[any]{Model: "v", Class: ClassBatch, Input: 1})
				errInfer <- err
			}()
			time.Sleep(10 * time.Millisecond)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			defer cancel()
			err := s.Close(ctx)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("close: %v", err)
			}
			if err2 := s.Close(t.Context()); err2 != err {
				t.Errorf("second close: %v, want the first result", err2)
			}
			wg.Wait()
			for i, r := range res {
				if !errors.Is(r.err, ErrCancelled) || r.tl.Outcome != OutcomeCancelled {
					t.Errorf("%d: %v %v", i, r.err, r.tl.Outcome)
				}
			}
			if err := <-errInfer; err != nil && !errors.Is(err, ErrCancelled) {
				t.Errorf("infer: %v", err)
			}
			for _, e := range f.check(testBlocks) {
				t.Error(e)
			}
			if st := s.Stats(); st.Cancelled < 3 {
				t.Errorf("stats %+v", st)
			}
		})
	})
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"fifo", Config{}.FIFO(), true},
		{"negative batch", Config{MaxBatch: -1}, false},
		{"negative chunk", Config{ChunkSize: -1}, false},
		{"alpha", Config{EWMAAlpha: 1.5}, false},
		{"delay", Config{InferMaxDelay: -time.Millisecond}, false},
		{"rate", Config{PrefillRateHint: -1}, false},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestInvalidRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTest(t, newFake(testBlocks, testBlockSize), testBlocks, Config{})
		for _, req := range []Request{{Prompt: prompt(1, 1)}, {Model: "m"}, {Model: "m", Prompt: prompt(1, 1), Class: 9}, {Model: "m", Prompt: prompt(1, 1), MaxTokens: -1}} {
			if _, err := s.Submit(t.Context(), req); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("%+v: %v", req, err)
			}
		}
	})
}

// Stop ends a request as completed (a caller-side stop string), Cancel as
// cancelled; both free its KV within a step.
func TestStopRecordsCompleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(64, 16)
		s := newTest(t, f, 64, Config{})
		for _, stop := range []bool{true, false} {
			st, err := s.Submit(t.Context(), Request{Model: "m", Prompt: []int32{1, 2, 3}, MaxTokens: 50})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, err := range st.Tokens() {
				if err != nil {
					break
				}
				if n++; n == 3 {
					if stop {
						st.Stop()
					} else {
						st.Cancel()
					}
				}
			}
			<-st.Done()
			want := OutcomeCancelled
			if stop {
				want = OutcomeCompleted
			}
			if tl := st.Timeline(); tl.Outcome != want || (stop && st.Err() != nil) {
				t.Fatalf("stop=%v: outcome %v err %v, want %v", stop, tl.Outcome, st.Err(), want)
			}
		}
	})
}
