package sched

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestTPOTAwareBatchSizing: on a device whose step grows steeply with
// rows (3 ms + 3.6 ms per row, the int4 synthetic-110m figure), eight
// streams with a TPOT objective of 16.5 ms (2.5× the solo step) are run at
// most three at a time, so every one meets it; with the rule off all
// eight decode together and every one misses it.
func TestTPOTAwareBatchSizing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		off     bool
		maxRows int // most decode rows allowed in a step
	}{
		{"tpot-aware", false, 3},
		{"off", true, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(1024, testBlockSize)
				f.a, f.b, f.c = 3*time.Millisecond, 3600*time.Microsecond, 0
				s := newTest(t, f, 1024, Config{MaxBatch: 8, ChunkSize: 16, NoTPOTAdmission: tc.off})
				slo := SLO{TPOT: 16500 * time.Microsecond}
				var wg sync.WaitGroup
				res := make([]result, 8)
				for i := range res {
					consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(8, int32(i)), MaxTokens: 60, SLO: slo}), &res[i])
				}
				wg.Wait()
				met := 0
				for i, r := range res {
					if r.err != nil {
						t.Fatalf("stream %d: %v", i, r.err)
					}
					if r.tl.MetSLO() {
						met++
					}
				}
				f.mu.Lock()
				most := 0
				for _, b := range f.mu.decodeB {
					most = max(most, b)
				}
				f.mu.Unlock()
				st := s.Stats()
				t.Logf("most decode rows %d, met TPOT %d/8, deferred %d, predicted TPOT %v", most, met, st.TPOTDeferred, st.PredictedTPOT)
				if most > tc.maxRows {
					t.Errorf("a step decoded %d rows, want ≤ %d", most, tc.maxRows)
				}
				if !tc.off {
					if met != 8 {
						t.Errorf("%d/8 streams met their TPOT objective, want all", met)
					}
					if st.TPOTDeferred == 0 {
						t.Error("no admission was deferred")
					}
				}
				if tc.off && met != 0 {
					t.Errorf("with the rule off %d/8 met the objective; the test no longer shows the rule's effect", met)
				}
			})
		})
	}
}

// TestDecodeCostPredict: the cost model answers measured row counts from
// their EWMA, extrapolates a line beyond them, and with one measurement
// takes half of it as fixed and half as per-row cost.
func TestDecodeCostPredict(t *testing.T) {
	c := newDecodeCost(8, 1)
	if c.predict(3) != 0 || c.stepAt(3) != 0 {
		t.Fatal("prediction before any measurement")
	}
	c.observe(1, 0, 6*time.Millisecond)
	if got := c.predict(2); got != 9*time.Millisecond {
		t.Errorf("one point: predict(2) = %v, want 9ms (half fixed, half per row)", got)
	}
	c.observe(2, 0, 9*time.Millisecond)
	if got := c.predict(4); got != 15*time.Millisecond {
		t.Errorf("line through (1,6) (2,9): predict(4) = %v, want 15ms", got)
	}
	if got := c.predict(2); got != 9*time.Millisecond {
		t.Errorf("measured predict(2) = %v", got)
	}
	// A step carrying a prefill chunk: 20 ms at 2 rows is 11 ms of prefill.
	c.observe(2, 64, 20*time.Millisecond)
	if c.prefill <= 0 || c.stepAt(2) <= 9*time.Millisecond {
		t.Errorf("prefill share %v not counted (stepAt(2) = %v)", c.prefill, c.stepAt(2))
	}
	if c.predict(2) != 9*time.Millisecond {
		t.Error("a prefill step changed the decode-only estimate")
	}
}

// TestLateRequestYields: with one slot and a queue, a request whose TTFT
// objective has already passed yields to the one behind it that can still
// meet its own; both are served. StrictFIFO keeps arrival order, and then
// both miss.
func TestLateRequestYields(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "strict-fifo"}[strict], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(4096, testBlockSize)
				s := newTest(t, f, 4096, Config{MaxBatch: 1, ChunkSize: 1 << 20, TokenBudget: 1 << 20, StrictFIFO: strict})
				var wg sync.WaitGroup
				var warm result
				consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(256, 0), MaxTokens: 2}), &warm)
				wg.Wait()
				// A long request occupies the only slot for ~400 ms.
				var long result
				consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(64, 1), MaxTokens: 400}), &long)
				synctest.Wait()
				// "late" has a 100 ms TTFT objective it can no longer meet by
				// the time the slot frees; "fresh" arrives later with 2 s.
				var late, fresh result
				consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(64, 2), MaxTokens: 4, SLO: SLO{TTFT: 100 * time.Millisecond}}), &late)
				time.Sleep(150 * time.Millisecond)
				consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(64, 3), MaxTokens: 4, SLO: SLO{TTFT: 400 * time.Millisecond}}), &fresh)
				wg.Wait()
				for _, r := range []*result{&long, &late, &fresh} {
					if r.err != nil || r.tl.Outcome != OutcomeCompleted {
						t.Fatalf("outcome %v, err %v", r.tl.Outcome, r.err)
					}
				}
				t.Logf("late TTFT %v (SLO 100ms), fresh TTFT %v (SLO 400ms)", late.tl.TTFT(), fresh.tl.TTFT())
				first := fresh.tl.FirstToken.Before(late.tl.FirstToken)
				if !strict && (!first || !fresh.tl.MetSLO()) {
					t.Errorf("the late request did not yield: fresh first=%v, fresh met SLO=%v", first, fresh.tl.MetSLO())
				}
				if strict && first {
					t.Error("StrictFIFO: a later request overtook")
				}
			})
		})
	}
}

// TestSlackAllows: a running stream on pace for its TPOT objective with
// five tokens to go can absorb a short prompt's prefill but not a long
// one's; a stream with plenty of tokens left absorbs either.
func TestSlackAllows(t *testing.T) {
	s := &Scheduler[any]{cfg: Config{}.withDefaults()}
	s.mu.est.prefillSpeed = 1000 // tokens/s: a 100-token prompt costs 100 ms
	now := time.Now()
	running := func(maxTokens int) *genReq {
		r := &genReq{req: Request{Model: "m", MaxTokens: maxTokens, SLO: SLO{TPOT: 20 * time.Millisecond}}, promptLen: 10}
		r.tokens = make([]int32, 10+15) // 15 generated, exactly on pace
		r.tl.FirstToken = now.Add(-14 * 20 * time.Millisecond)
		return r
	}
	newReq := func(n int) *genReq {
		return &genReq{req: Request{Model: "m"}, tokens: make([]int32, n)}
	}
	const step = 15 * time.Millisecond // leaves 18 − 15 = 3 ms per token
	s.running = []*genReq{running(20)}
	if !s.slackAllows(newReq(10), step) {
		t.Error("a 10 ms prefill refused though 5 tokens × 3 ms = 15 ms of slack remain")
	}
	if s.slackAllows(newReq(100), step) {
		t.Error("a 100 ms prefill admitted against 15 ms of slack")
	}
	s.running = []*genReq{running(200)}
	if !s.slackAllows(newReq(100), step) {
		t.Error("a 100 ms prefill refused though 185 tokens × 3 ms remain")
	}
}

// TestLateLocked: a request past its TTFT objective is late; one that
// already streamed (preempted, waiting to resume) never is; without an
// objective or a measured prefill speed nothing is.
func TestLateLocked(t *testing.T) {
	s := &Scheduler[any]{cfg: Config{}.withDefaults()}
	now := time.Now()
	g := &genReq{req: Request{SLO: SLO{TTFT: 10 * time.Millisecond}}, tokens: make([]int32, 50)}
	g.tl.Arrived = now.Add(-time.Second)
	if s.lateLocked(g, now) {
		t.Error("late before any prefill speed was measured")
	}
	s.mu.est.prefillSpeed = 1000
	if !s.lateLocked(g, now) {
		t.Error("a second past a 10 ms objective is not late")
	}
	g.tl.FirstToken = now.Add(-500 * time.Millisecond)
	if s.lateLocked(g, now) {
		t.Error("a preempted stream counted as late")
	}
	fresh := &genReq{req: Request{SLO: SLO{TTFT: time.Second}}, tokens: make([]int32, 50)}
	fresh.tl.Arrived = now
	if s.lateLocked(fresh, now) {
		t.Error("a fresh request with a 1 s objective and a 50 ms prefill is late")
	}
}
