package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// latencies is an observer: the engine tells it of every finished request
// (the Prometheus collector of pkg/metrics/prom plugs in the same way).
type latencies struct {
	mu    sync.Mutex
	ttfts []time.Duration
}

func (l *latencies) ObserveTimeline(r *engine.Record) {
	if d, ok := r.TTFT(); ok {
		l.mu.Lock()
		l.ttfts = append(l.ttfts, d)
		l.mu.Unlock()
	}
}

// An assistant app streams a reply from a decoder bundle as it is generated,
// then reads how the request ended. The engine shares the device between this
// request and any others (a detector's Infer calls, say). (No Output: the
// text depends on the bundle on disk.)
func Example() {
	ctx := context.Background()
	obs := &latencies{}
	e, err := engine.Open(ctx, engine.Config{
		// a bundle directory: edgeinfer.json, model.onnx, tokenizer.json
		Models:    []engine.ModelSpec{{Dir: "models/assistant", Name: "assistant"}},
		Observers: []engine.Observer{obs},
	})
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer e.Close(ctx)

	s := e.Generate(ctx, "assistant", "User: Why is the sky blue?\nAssistant:", engine.GenerateOptions{
		MaxTokens: 128,
		Stop:      []string{"\nUser:"},
		Class:     engine.ClassInteractive,
		// refuse at once, rather than keep the user waiting, when the
		// first token cannot come within a second
		SLO:      engine.SLO{TTFT: time.Second},
		FailFast: true,
	})
	for tok, err := range s.Tokens() {
		if over, ok := errors.AsType[*engine.OverloadError](err); ok {
			fmt.Println("busy, try again in", over.RetryAfter)
			return
		}
		if err != nil {
			fmt.Println("\ngenerate:", err)
			return
		}
		fmt.Print(tok.Text) // breaking out of the loop would cancel the request
	}
	sum := s.Summary()
	fmt.Printf("\n%s: %d tokens, TTFT %v, %v per token\n", sum.Finish, sum.OutputTokens, sum.TTFT, sum.TPOT)
	if sum.Finish == engine.FinishLength {
		fmt.Println("(the reply was cut at MaxTokens)")
	}
}

// A detector runs on every camera frame as a realtime one-shot request
// beside the assistant's streams.
func ExampleEngine_Infer() {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Models: []engine.ModelSpec{{Dir: "models/face_detection.onnx", Name: "faces"}}})
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer e.Close(ctx)
	var frame engine.Inputs // {"input:0": a [1,128,128,3] float32 tensor from runtime/ort}
	out, err := e.Infer(ctx, "faces", frame, engine.InferOptions{Class: engine.ClassRealtime, SLO: engine.SLO{Deadline: 50 * time.Millisecond}})
	if errors.Is(err, engine.ErrDeadline) {
		fmt.Println("frame dropped: too late")
		return
	}
	if err != nil {
		fmt.Println("infer:", err)
		return
	}
	defer out.Close()
	fmt.Println(len(out), "outputs")
}
