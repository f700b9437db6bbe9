package sched

import (
	"context"
	"testing"
)

// nopExec is an Executor that does no work, so a benchmark of the loop over
// it measures the scheduler alone.
type nopExec struct{}

func (nopExec) Admit(context.Context, Sequence) (int, error) { return 0, nil }
func (nopExec) Extend(SeqID, int) error                      { return nil }
func (nopExec) Release(SeqID)                                {}
func (nopExec) Infer(_ context.Context, _ string, in []any) ([]any, error) {
	return make([]any, len(in)), nil
}
func (nopExec) Step(_ context.Context, b *Batch) (StepResult, error) {
	r := StepResult{Tokens: make([]Sampled, 0, len(b.Decode)+len(b.Prefill))}
	for _, d := range b.Decode {
		r.Tokens = append(r.Tokens, Sampled{Seq: d.Seq, Token: 1})
	}
	for _, c := range b.Prefill {
		if c.Last {
			r.Tokens = append(r.Tokens, Sampled{Seq: c.Seq, Token: 1})
		}
	}
	return r, nil
}

// BenchmarkStepOverhead measures the scheduler's own cost per step at
// batch 8 (composition, bookkeeping, streaming tokens), with an executor that
// does nothing. Compare ns/step with a real step's time (the budget
// is 2 % of the step at batch 8).
func BenchmarkStepOverhead(b *testing.B) {
	s, err := New[any](nopExec{}, nopExec{}, Config{MaxBatch: 8}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	const streams = 8
	tokens := b.N/streams + 1
	b.ResetTimer()
	done := make(chan struct{}, streams)
	for range streams {
		st, err := s.Submit(b.Context(), Request{Model: "m", Prompt: []int32{1, 2, 3, 4}, MaxTokens: tokens})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for range st.Tokens() {
			}
			done <- struct{}{}
		}()
	}
	for range streams {
		<-done
	}
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(st.LoopTime.Nanoseconds())/float64(st.Steps), "ns/step")
	b.ReportMetric(float64(st.LoopTime-st.ExecTime)/float64(st.Steps), "overhead-ns/step")
}
