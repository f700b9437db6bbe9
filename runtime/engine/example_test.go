package engine_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/sched"
)

// An assistant app streams a reply from a decoder bundle as it is generated.
// The engine shares the device between this request and any others; the
// timeline of each request is available afterwards for metrics. (No Output:
// the text depends on the bundle on disk.)
func Example() {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{
		// a bundle directory: edgeinfer.json, model.onnx, tokenizer.json
		Models:  []engine.ModelSpec{{Dir: "models/assistant", Name: "assistant"}},
		Session: ort.Options{IntraOpThreads: 2},
	})
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer e.Close(ctx)

	opts := engine.GenerateOptions{
		MaxTokens: 128,
		Stop:      []string{"\nUser:"},
		Class:     sched.ClassInteractive,
		// refuse at once, rather than keep the user waiting, when the
		// first token cannot come within a second
		SLO:      sched.SLO{TTFT: time.Second},
		FailFast: true,
	}
	for tok, err := range e.Generate(ctx, "assistant", "User: Why is the sky blue?\nAssistant:", opts) {
		if over, ok := errors.AsType[*sched.OverloadError](err); ok {
			fmt.Println("busy, try again in", over.RetryAfter)
			return
		}
		if err != nil {
			fmt.Println("\ngenerate:", err)
			return
		}
		fmt.Print(tok.Text) // breaking out of the loop would cancel the request
	}
	fmt.Println()

	for _, r := range e.Records() {
		fmt.Printf("%s: TTFT %v, %d tokens at %v each\n", r.Outcome, r.TTFT(), r.OutputTokens(), r.TPOT())
	}
}
