package sched

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestInferDynamicBatching: requests arriving within InferMaxDelay share a
// batch; a full batch runs without waiting.
func TestInferDynamicBatching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(testBlocks, testBlockSize)
		s := newTest(t, f, testBlocks, Config{InferMaxBatch: 4, InferMaxDelay: 5 * time.Millisecond})
		var wg sync.WaitGroup
		outs := make([]InferResult[any], 6)
		errs := make([]error, 6)
		for i := range outs {
			wg.Go(func() { outs[i], errs[i] = s.Infer(t.Context(), InferRequest[any]{Model: "det", Input: i}) })
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		for i := range outs {
			if errs[i] != nil || outs[i].Output != "det("+string(rune('0'+i))+")" {
				t.Errorf("%d: %v %v", i, outs[i].Output, errs[i])
			}
		}
		f.mu.Lock()
		batches := slices.Clone(f.mu.batches)
		f.mu.Unlock()
		if !slices.Equal(batches, []int{4, 2}) {
			t.Errorf("batches %v, want [4 2]", batches)
		}
		if tl := outs[0].Timeline; tl.BatchSize != 4 || tl.Admitted.Sub(tl.Arrived) != 3*time.Millisecond || tl.Outcome != OutcomeCompleted {
			t.Errorf("first timeline %+v", tl)
		}
		if tl := outs[4].Timeline; tl.Admitted.Sub(tl.Arrived) != 5*time.Millisecond {
			t.Errorf("a lone request ran before InferMaxDelay: waited %v", tl.Admitted.Sub(tl.Arrived))
		}
	})
}

// camera runs frames at 10 FPS for the given time and returns their latencies.
func camera(t *testing.T, s *Scheduler[any], d time.Duration) []time.Duration {
	var lat []time.Duration
	for start := time.Now(); time.Since(start) < d; {
		r, err := s.Infer(t.Context(), InferRequest[any]{Model: "cam", Class: ClassRealtime, Input: 0})
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, r.Timeline.E2E())
		time.Sleep(100*time.Millisecond - r.Timeline.E2E())
	}
	return lat
}

func p99(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[(len(d)*99+99)/100-1]
}

// TestInferBesideChat: realtime camera frames at 10 FPS beside chat streams
// keep their p99 latency within one decode step of their solo p99.
func TestInferBesideChat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(1024, testBlockSize)
		s := newTest(t, f, 1024, Config{MaxBatch: 8})
		solo := camera(t, s, 3*time.Second)

		var wg sync.WaitGroup
		chats := make([]result, 6)
		for i := range chats {
			consume(&wg, submit(t, s, t.Context(), Request{Model: "m", Prompt: prompt(200+50*i, int32(i)), MaxTokens: 2000}), &chats[i])
		}
		time.Sleep(100 * time.Millisecond) // prompts prefilled: the chats stream
		busy := camera(t, s, 2*time.Second)
		st := s.Stats()
		wg.Wait()
		for _, c := range chats {
			if c.err != nil {
				t.Fatal(c.err)
			}
		}
		step := st.StepTime
		t.Logf("solo p99 %v, beside chat p99 %v, decode step %v", p99(solo), p99(busy), step)
		if st.Running == 0 {
			t.Fatalf("chat was not running during the camera run")
		}
		if p99(busy) > p99(solo)+step+step/10 {
			t.Errorf("camera p99 %v beside chat exceeds solo %v + one step %v", p99(busy), p99(solo), step)
		}
	})
}

// TestInferCancelAndOverload: a cancelled waiting request leaves the queue;
// a fail-fast one over its latency SLO is refused.
func TestInferCancelAndOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(testBlocks, testBlockSize)
		s := newTest(t, f, testBlocks, Config{InferMaxBatch: 2, InferMaxDelay: 50 * time.Millisecond})
		// Measure one batch.
		if _, err := s.Infer(t.Context(), InferRequest[any]{Model: "v", Input: 0}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := t.Context(), func() {}
		ctx2, cancel2 := contextWithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { _, err := s.Infer(ctx2, InferRequest[any]{Model: "v", Input: 1}); done <- err }()
		time.Sleep(time.Millisecond)
		cancel2()
		if err := <-done; !errors.Is(err, ErrCancelled) {
			t.Errorf("cancelled infer: %v", err)
		}
		_, err := s.Infer(t.Context(), InferRequest[any]{Model: "v", Input: 2, FailFast: true, SLO: SLO{TTFT: 10 * time.Millisecond}})
		var oe *OverloadError
		if !errors.As(err, &oe) || oe.RetryAfter <= 0 {
			t.Errorf("fail-fast infer with a 50ms batch delay: %v", err)
		}
	})
}

func contextWithCancel(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}
