package sched_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
)

// echoExec is a toy Executor: its "model" always answers the previous token
// plus one, and its KV cache is unlimited.
type echoExec struct{}

func (echoExec) Admit(context.Context, sched.Sequence) (int, error) { return 0, nil }
func (echoExec) Extend(sched.SeqID, int) error                      { return nil }
func (echoExec) Release(sched.SeqID)                                {}

func (echoExec) Step(_ context.Context, b *sched.Batch) (sched.StepResult, error) {
	var r sched.StepResult
	for _, row := range b.Decode {
		r.Tokens = append(r.Tokens, sched.Sampled{Seq: row.Seq, Token: row.Token + 1})
	}
	for _, c := range b.Prefill {
		if c.Last {
			r.Tokens = append(r.Tokens, sched.Sampled{Seq: c.Seq, Token: c.Tokens[len(c.Tokens)-1] + 1})
		}
	}
	return r, nil
}

func (echoExec) Infer(_ context.Context, model string, inputs []any) ([]any, error) {
	out := make([]any, len(inputs))
	for i, in := range inputs {
		out[i] = fmt.Sprintf("%s saw %v", model, in)
	}
	return out, nil
}

// An application streams tokens from a chat request while a camera frame is
// classified on the same device.
func Example() {
	s, err := sched.New[any](echoExec{}, echoExec{}, sched.Config{MaxBatch: 8, ChunkSize: 256}, nil)
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())

	ctx := context.Background()
	st, err := s.Submit(ctx, sched.Request{
		Model: "chat", Class: sched.ClassInteractive,
		Prompt: []int32{10, 11, 12}, MaxTokens: 4,
	})
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		r, err := s.Infer(ctx, sched.InferRequest[any]{Model: "detector", Class: sched.ClassRealtime, Input: "frame-1"})
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Output)
	})
	wg.Wait()

	for tok, err := range st.Tokens() {
		if err != nil {
			panic(err)
		}
		fmt.Println("token", tok.Index, tok.ID)
	}
	tl := st.Timeline()
	fmt.Println(tl.Outcome, tl.OutputTokens(), "tokens")
	// Output:
	// detector saw frame-1
	// token 0 13
	// token 1 14
	// token 2 15
	// token 3 16
	// completed 4 tokens
}
