package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestAdmissionRecoversAfterBurst is the property behind "admission that
// cannot lock out": after any burst (random prompt and output lengths,
// classes, a mix of fail-fast and queuing requests, a KV cache and TPOT
// objectives tight enough that steps wait), once the device is idle the
// same fail-fast request whose own prefill fits its objective is admitted
// at once, and its first token comes within the objective. A burst used to
// leave the prefill rate learnt from its waiting steps in place; with every
// fail-fast request refused nothing revised it, and the idle device refused
// that request forever.
//
// It also holds each refusal's RetryAfter to its word: the last request
// refused during the burst, submitted again RetryAfter later with nothing
// else arriving, is admitted (with the slack of one step the estimates may
// move by meanwhile).
func TestAdmissionRecoversAfterBurst(t *testing.T) {
	seeds := 16
	if testing.Short() {
		seeds = 6
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { burstThenIdle(t, uint64(seed)) })
		})
	}
}

func burstThenIdle(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 31))
	maxBatch := 1 + rng.IntN(8)
	// KV for a full batch of the longest requests, sometimes less (then
	// admission also waits for KV).
	blocks := maxBatch * (128 + 48) / 8 * (1 + rng.IntN(3)) / 2
	f := newFake(blocks, 8)
	cfg := Config{
		MaxBatch:  maxBatch,
		ChunkSize: 16 + rng.IntN(64),
		// Room for the whole burst: the property is about what refusals
		// predict, not the queue bound.
		QueueLimit: 512,
	}
	s := newTest(t, f, blocks, cfg)

	// The request that must get through afterwards: 24 tokens, whose solo
	// prefill on the fake costs 1 ms + 24 × 20 µs ≈ 1.5 ms, under a 10 ms
	// objective.
	probe := func(i int32) Request {
		return Request{Model: "m", Prompt: prompt(24, 9000+i), MaxTokens: 8, FailFast: true, SLO: SLO{TTFT: 10 * time.Millisecond}}
	}
	var wg sync.WaitGroup
	// Warm-up: the estimates are measured on an idle device first.
	var warm result
	consume(&wg, submit(t, s, t.Context(), probe(0)), &warm)
	wg.Wait()

	n := 80 + rng.IntN(220)
	var (
		admitted, refused int
		last              *OverloadError
		lastReq           Request
		results           = make([]result, n)
	)
	for i := range n {
		if rng.IntN(3) == 0 {
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		}
		req := Request{
			Model: "m", Class: Class(1 + rng.IntN(3)),
			Prompt: prompt(4+rng.IntN(124), int32(i+1)), MaxTokens: 1 + rng.IntN(48),
		}
		if rng.IntN(4) != 0 {
			req.FailFast = true
			req.SLO.TTFT = time.Duration(5+rng.IntN(60)) * time.Millisecond
		}
		if rng.IntN(3) == 0 {
			req.SLO.TPOT = time.Duration(2+rng.IntN(8)) * time.Millisecond
		}
		st, err := s.Submit(t.Context(), req)
		var oe *OverloadError
		switch {
		case errors.As(err, &oe):
			refused++
			continue
		case err != nil:
			t.Fatalf("submit %d: %v", i, err)
		}
		admitted++
		consume(&wg, st, &results[i])
	}
	// The burst ends on a refusal, so that nothing arrives after it: more
	// fail-fast requests until one is refused.
	for k := range 64 {
		req := Request{Model: "m", Prompt: prompt(32, int32(n+k+1)), MaxTokens: 4, FailFast: true, SLO: SLO{TTFT: 20 * time.Millisecond}}
		st, err := s.Submit(t.Context(), req)
		var oe *OverloadError
		if errors.As(err, &oe) {
			refused++
			last, lastReq = oe, req
			break
		} else if err != nil {
			t.Fatalf("submit: %v", err)
		}
		admitted++
		var r result
		consume(&wg, st, &r)
	}

	// RetryAfter keeps its word: nothing else arrives now, and a client
	// that waits each RetryAfter (one step's slack) gets in within a few
	// tries. It is a prediction from rates measured over the last steps: a
	// queue that moves slower than they said (a full batch of long
	// outputs, a KV cache that admits one at a time) takes longer, and the
	// next refusal says how much more.
	if last != nil {
		first, refusedAt := last.RetryAfter, time.Now()
		ok := false
		for try := 1; try <= 6 && !ok; try++ {
			time.Sleep(last.RetryAfter + s.Stats().StepTime)
			st, err := s.Submit(t.Context(), lastReq)
			switch {
			case err == nil:
				ok = true
				var r result
				consume(&wg, st, &r)
				t.Logf("retry %d admitted %v after the refusal; the first RetryAfter said %v", try, time.Since(refusedAt), first)
			case errors.As(err, &last):
			default:
				t.Fatalf("retry: %v", err)
			}
		}
		if !ok {
			t.Errorf("a request refused with RetryAfter %v was still refused after 6 retries at each RetryAfter (%v later, nothing else arriving): %v", first, time.Since(refusedAt), last)
		}
	}
	wg.Wait()
	synctest.Wait() // the device loop is idle

	st, err := s.Submit(t.Context(), probe(1))
	if err != nil {
		est := s.Stats()
		t.Fatalf("after a burst (%d admitted, %d refused) the idle device refuses a request whose own prefill fits: %v (prefill rate %.0f tok/s, speed %.0f, solo %.0f, step %v)",
			admitted, refused, err, est.PrefillRate, est.PrefillSpeed, est.SoloPrefillSpeed, est.StepTime)
	}
	var after result
	consume(&wg, st, &after)
	wg.Wait()
	if after.err != nil || after.tl.TTFT() > 10*time.Millisecond {
		t.Errorf("the request after the burst: %v, ttft %v over its 10ms objective", after.err, after.tl.TTFT())
	}
	t.Logf("seed %d: %d blocks, batch %d: %d admitted, %d refused; after: ttft %v", seed, blocks, cfg.MaxBatch, admitted, refused, after.tl.TTFT())
}

// TestLateBacklogKeepsASlot: while a backlog of requests that have already
// missed their TTFT objective drains, a new request that can still be on
// time starts at once (a slot is kept free for it) and meets its objective.
func TestLateBacklogKeepsASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, wg, backlog := lateBacklog(t)
		// The first four were on time when admitted; the rest are late by
		// the time those finish (64 steps of about a millisecond).
		time.Sleep(120 * time.Millisecond)
		if st := s.Stats(); st.QueuedIn(ClassInteractive) == 0 {
			t.Fatalf("no backlog: %+v", st)
		}
		st, err := s.Submit(t.Context(), Request{Model: "m", Prompt: prompt(16, 99), MaxTokens: 4, FailFast: true, SLO: SLO{TTFT: 10 * time.Millisecond}})
		if err != nil {
			t.Fatalf("an on-time request beside a late backlog: %v", err)
		}
		var r result
		consume(wg, st, &r)
		wg.Wait()
		if r.err != nil || r.tl.TTFT() > 10*time.Millisecond {
			t.Errorf("on-time request beside a late backlog: %v, ttft %v over its 10ms objective", r.err, r.tl.TTFT())
		}
		for i, b := range backlog {
			if b.err != nil {
				t.Errorf("backlog request %d: %v", i, b.err)
			}
		}
	})
}

// TestColdStartDoesNotLockOut: a session's first run is slow (it
// allocates), so the first request measures a prefill speed far below the
// device's. An idle device then predicts the next fail-fast request over
// its objective by itself: it admits one probe, which runs (a probe is
// never refused in the queue), measures the device again, and from then on
// the same request is admitted.
func TestColdStartDoesNotLockOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(4096, testBlockSize)
		f.coldStep = 150 * time.Millisecond
		s := newTest(t, f, 4096, Config{})
		req := Request{Model: "m", Prompt: prompt(12, 1), MaxTokens: 4, FailFast: true, SLO: SLO{TTFT: 100 * time.Millisecond}}
		var wg sync.WaitGroup
		run := func() error {
			st, err := s.Submit(t.Context(), req)
			if err != nil {
				return err
			}
			var r result
			consume(&wg, st, &r)
			wg.Wait()
			return r.err
		}
		if err := run(); err != nil { // the cold one: nothing measured yet
			t.Fatal(err)
		}
		synctest.Wait()
		admitted := 0
		for i := range 6 {
			err := run()
			var oe *OverloadError
			switch {
			case err == nil:
				admitted++
			case errors.As(err, &oe) && oe.Alone && i == 0:
				t.Fatalf("the first request after the cold one was refused, not probed: %v", err)
			case errors.As(err, &oe):
				time.Sleep(oe.RetryAfter)
			default:
				t.Fatal(err)
			}
			synctest.Wait()
		}
		if admitted < 5 {
			t.Errorf("after a cold first step, %d of 6 requests admitted on an idle device (stats %+v)", admitted, s.Stats())
		}
	})
}

// TestOnTimeRequestPreemptsLateStream: beside a late backlog that fills
// the batch but for the slot it keeps free, three requests that can still
// be on time arrive together. The first takes the free slot; the others
// would wait for a late stream to end (64 steps, many times their
// objective) — instead each preempts a stream that was admitted late, and
// all three meet their objective. The late streams finish, their tokens
// kept across the preemption.
func TestOnTimeRequestPreemptsLateStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, wg, backlog := lateBacklog(t)
		// the first four finish on time; late ones hold three slots after
		time.Sleep(120 * time.Millisecond)
		if st := s.Stats(); st.QueuedIn(ClassInteractive) == 0 || st.Running < 3 {
			t.Fatalf("no late backlog running: %+v", st)
		}
		before := s.Stats().Preemptions
		onTime := make([]result, 3)
		for i := range onTime {
			consume(wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(16, int32(90+i)), MaxTokens: 4, SLO: SLO{TTFT: 10 * time.Millisecond}}), &onTime[i])
		}
		wg.Wait()
		for i, r := range onTime {
			if r.err != nil || r.tl.TTFT() > 10*time.Millisecond {
				t.Errorf("on-time request %d beside a late backlog: %v, ttft %v over its 10ms objective", i, r.err, r.tl.TTFT())
			}
		}
		if p := s.Stats().Preemptions - before; p < 2 {
			t.Errorf("%d preemptions for three on-time requests beside a full late batch, want at least 2", p)
		}
		for i, b := range backlog {
			if b.err != nil || len(b.tokens) != 64 {
				t.Errorf("backlog request %d: %v, %d of 64 tokens", i, b.err, len(b.tokens))
			}
		}
	})
}

// TestOnTimeFirstTokenWithoutLateRows: an on-time request admitted beside
// streams admitted late gets its first token from a step the late streams
// sit out (their decode rows would lengthen it), and they then go on to
// finish. Under StrictFIFO they keep their rows.
func TestOnTimeFirstTokenWithoutLateRows(t *testing.T) {
	for _, strict := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			f, s, wg, backlog := backlogOf(t, Config{MaxBatch: 8, StrictFIFO: strict}, 12, 2*time.Millisecond)
			time.Sleep(100 * time.Millisecond) // the first batch done; the rest admitted late
			onTime := make([]result, 3)
			var ids []SeqID
			for i := range onTime {
				st := submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(16, int32(90+i)), MaxTokens: 4, SLO: SLO{TTFT: 50 * time.Millisecond}})
				ids = append(ids, st.ID())
				consume(wg, st, &onTime[i])
				time.Sleep(5 * time.Millisecond)
			}
			wg.Wait()
			f.mu.Lock()
			defer f.mu.Unlock()
			for i, id := range ids {
				rows := f.mu.firstRows[id]
				switch {
				case onTime[i].err != nil:
					t.Errorf("on-time request %d: %v", i, onTime[i].err)
				case !strict && rows != 0:
					t.Errorf("on-time request %d got its first token from a step with %d decode rows beside late streams", i, rows)
				case strict && rows == 0:
					t.Errorf("StrictFIFO: on-time request %d's first step had no decode rows; the late streams should keep theirs", i)
				}
			}
			for i, b := range backlog {
				if b.err != nil || len(b.tokens) != 64 {
					t.Errorf("backlog request %d: %v, %d of 64 tokens", i, b.err, len(b.tokens))
				}
			}
		})
	}
}

// lateBacklog starts a scheduler with a batch of 4 and sends it 24
// requests of 64 tokens with a 5 ms TTFT objective: the first four are on
// time when admitted, the rest late by the time those finish (64 steps of
// about a millisecond). Their results land in backlog once wg is done.
func lateBacklog(t *testing.T) (*Scheduler[any], *sync.WaitGroup, []result) {
	t.Helper()
	_, s, wg, backlog := backlogOf(t, Config{MaxBatch: 4}, 24, 5*time.Millisecond)
	return s, wg, backlog
}

// backlogOf starts a scheduler of cfg, runs one warm-up request, and sends
// n requests of 64 tokens with a TTFT objective of ttft.
func backlogOf(t *testing.T, cfg Config, n int, ttft time.Duration) (*fakeExec, *Scheduler[any], *sync.WaitGroup, []result) {
	t.Helper()
	f := newFake(4096, testBlockSize)
	s := newTest(t, f, 4096, cfg)
	wg := &sync.WaitGroup{}
	var warm result
	consume(wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(16, 0), MaxTokens: 4}), &warm)
	wg.Wait()
	backlog := make([]result, n)
	for i := range backlog {
		consume(wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(16, int32(i+1)), MaxTokens: 64, SLO: SLO{TTFT: ttft}}), &backlog[i])
	}
	return f, s, wg, backlog
}
