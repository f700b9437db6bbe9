package sched

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRandomWorkloadInvariants drives random workloads (classes, prompt and
// output lengths, cancellations, deadlines, a KV cache small enough to force
// preemption, random configurations) and checks the scheduler's invariants:
// every request is recorded exactly once; completed output equals the
// reference model's; unfinished output is a prefix of it; the executor's
// contract holds (positions, chunk bounds, KV covering every row); every KV
// block comes back.
func TestRandomWorkloadInvariants(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 4
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { randomWorkload(t, uint64(seed)) })
		})
	}
}

func randomWorkload(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	blocks := 24 + rng.IntN(64)
	f := newFake(blocks, 8)
	cfg := Config{
		MaxBatch:         1 + rng.IntN(6),
		ChunkSize:        8 + rng.IntN(64),
		MaxPrefillChunks: 1 + rng.IntN(2),
		AdmitReserve:     rng.IntN(8),
		QueueLimit:       64,
	}
	s, err := New[any](f, f, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 30
	type sub struct {
		prompt []int32
		max    int
		res    result
		id     SeqID
	}
	subs := make([]*sub, n)
	var wg sync.WaitGroup
	for i := range subs {
		time.Sleep(time.Duration(rng.IntN(4000)) * time.Microsecond)
		p := prompt(1+rng.IntN(100), int32(i))
		x := &sub{prompt: p, max: 1 + rng.IntN(40)}
		subs[i] = x
		ctx, cancel := context.WithCancel(t.Context())
		req := Request{Model: "m", Class: Class(1 + rng.IntN(3)), Prompt: p, MaxTokens: x.max}
		if rng.IntN(5) == 0 {
			req.SLO.Deadline = time.Duration(1+rng.IntN(40)) * time.Millisecond
		}
		st, err := s.Submit(ctx, req)
		if err != nil {
			cancel()
			t.Fatalf("submit %d: %v", i, err)
		}
		x.id = st.ID()
		consume(&wg, st, &x.res)
		if rng.IntN(6) == 0 {
			d := time.Duration(rng.IntN(30)) * time.Millisecond
			wg.Go(func() { time.Sleep(d); cancel() })
		} else {
			wg.Go(func() { <-st.Done(); cancel() })
		}
	}
	wg.Wait()
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, e := range f.check(blocks) {
		t.Error(e)
	}
	recs := s.Records()
	seen := map[uint64]int{}
	for _, r := range recs {
		seen[r.ID]++
	}
	var completed int
	for i, x := range subs {
		if seen[uint64(x.id)] != 1 {
			t.Errorf("request %d recorded %d times", i, seen[uint64(x.id)])
		}
		want := reference(x.prompt, x.max)
		switch x.res.tl.Outcome {
		case OutcomeCompleted:
			completed++
			if !slices.Equal(x.res.tokens, want) {
				t.Errorf("request %d (preempted %d): output differs from the reference", i, x.res.tl.Preemptions)
			}
		case OutcomeCancelled, OutcomeTimedOut:
			if !slices.Equal(x.res.tokens, want[:len(x.res.tokens)]) {
				t.Errorf("request %d: partial output is not a prefix of the reference", i)
			}
		default:
			// A prompt bigger than the whole cache may fail; nothing else.
			if len(x.prompt)+cfg.AdmitReserve <= blocks*8 {
				t.Errorf("request %d: outcome %v: %v", i, x.res.tl.Outcome, x.res.err)
			}
		}
	}
	st := s.Stats()
	if total := st.Completed + st.Cancelled + st.TimedOut + st.Failed + st.Rejected; total != uint64(n) {
		t.Errorf("outcome counters sum to %d, want %d", total, n)
	}
	t.Logf("seed %d: %d blocks, %+v: completed %d, preemptions %d, steps %d", seed, blocks, cfg, completed, st.Preemptions, st.Steps)
}

// TestFIFOConfig: Config.FIFO runs one request at a time, whole prompt in
// one step, in arrival order whatever the class.
func TestFIFOConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(1024, testBlockSize)
		s := newTest(t, f, 1024, Config{}.FIFO())
		var wg sync.WaitGroup
		res := make([]result, 4)
		for i := range res {
			consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(700, int32(i)), MaxTokens: 5}), &res[i])
		}
		wg.Wait()
		for i := 1; i < len(res); i++ {
			if res[i].tl.FirstScheduled.Before(res[i-1].tl.Finished) {
				t.Errorf("request %d started before %d finished", i, i-1)
			}
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if m := slices.Max(f.mu.decodeB); m != 1 {
			t.Errorf("decode batch %d in FIFO mode", m)
		}
		if m := slices.Max(f.mu.chunks); m != 700 {
			t.Errorf("largest prefill chunk %d, want the whole 700-token prompt", m)
		}
	})
}
