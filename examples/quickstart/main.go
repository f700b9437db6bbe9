// Command quickstart is the engine in one page: it opens a language model
// and a one-shot model on one device, streams an answer while a "camera"
// sends frames to the one-shot model at realtime priority, and prints what
// the engine recorded of every request.
//
//	go run ./examples/quickstart --model BUNDLE [--detector MODEL.onnx] [--prompt TEXT]
//
// BUNDLE is a decoder bundle (`edgeinfer model import --hf examples/tinylm
// --out /tmp/tinylm`); MODEL.onnx any one-shot ONNX model with float32
// inputs (BlazeFace in `make demo`'s output, say).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

func main() {
	model := flag.String("model", "", "decoder bundle directory (required)")
	detector := flag.String("detector", "", "one-shot .onnx model run as a camera beside the chat (optional)")
	prompt := flag.String("prompt", "Call me Ishmael", "prompt")
	maxTokens := flag.Int("max-tokens", 48, "tokens to generate at most")
	frames := flag.Int("frames", 10, "camera frames sent while the answer streams")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, *model, *detector, *prompt, *maxTokens, *frames); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// printer is an observer: the engine tells it of every finished request.
type printer struct {
	mu  sync.Mutex
	out []string
}

func (p *printer) ObserveTimeline(r *engine.Record) {
	ttft, _ := r.TTFT()
	e2e, _ := r.E2E()
	line := fmt.Sprintf("%-8s %-7s %-11s %-9s ttft %8v  e2e %8v  tokens %d", r.Model, r.Kind, r.Class, r.Outcome,
		ttft.Round(time.Microsecond), e2e.Round(time.Microsecond), r.OutputTokens)
	if r.FinishReason != "" {
		line += "  finish " + r.FinishReason
	}
	p.mu.Lock()
	p.out = append(p.out, line)
	p.mu.Unlock()
}

func run(ctx context.Context, w io.Writer, model, detector, prompt string, maxTokens, frames int) error {
	if model == "" {
		return errors.New("--model BUNDLE is required (edgeinfer model import --hf examples/tinylm --out /tmp/tinylm)")
	}
	specs := []engine.ModelSpec{{Dir: model, Name: "chat"}}
	if detector != "" {
		specs = append(specs, engine.ModelSpec{Dir: detector, Name: "camera"})
	}
	rec := &printer{}
	e, err := engine.Open(ctx, engine.Config{Models: specs, Observers: []engine.Observer{rec}})
	if err != nil {
		return err
	}

	// The camera: frames at realtime priority, each allowed 100 ms, while
	// the chat streams.
	var wg sync.WaitGroup
	camErr := make(chan error, 1)
	if detector != "" {
		frame, err := zeroInputs(e, "camera")
		if err != nil {
			return errors.Join(err, e.Close(ctx))
		}
		wg.Go(func() {
			defer closeInputs(frame)
			for range frames {
				out, err := e.Infer(ctx, "camera", frame, engine.InferOptions{
					Class: engine.ClassRealtime, SLO: engine.SLO{Deadline: 100 * time.Millisecond}})
				if err != nil && !errors.Is(err, engine.ErrDeadline) {
					camErr <- err
					return
				}
				if out != nil {
					_ = out.Close()
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}

	s := e.Generate(ctx, "chat", prompt, engine.GenerateOptions{MaxTokens: maxTokens, Sampling: &engine.Sampling{RepetitionPenalty: 1.3}})
	fmt.Fprint(w, prompt)
	for tok, err := range s.Tokens() {
		if err != nil {
			wg.Wait()
			return errors.Join(err, e.Close(ctx))
		}
		fmt.Fprint(w, tok.Text)
	}
	sum := s.Summary()
	fmt.Fprintf(w, "\n\nanswer: %d prompt + %d output tokens, finish %s, TTFT %v, TPOT %v\n",
		sum.PromptTokens, sum.OutputTokens, sum.Finish, sum.TTFT.Round(time.Microsecond), sum.TPOT.Round(time.Microsecond))
	wg.Wait()
	select {
	case err := <-camErr:
		return errors.Join(err, e.Close(ctx))
	default:
	}
	st := e.Stats()
	// Close tells the observers of the last records before it returns.
	if err := e.Close(ctx); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d steps, %d one-shot batches; every request, as recorded:\n", st.Scheduler.Steps, st.Scheduler.InferBatches)
	for _, l := range rec.out {
		fmt.Fprintln(w, l)
	}
	return nil
}

// zeroInputs makes a frame of zeros for every input of a one-shot model
// (symbolic dimensions become 1).
func zeroInputs(e *engine.Engine, model string) (engine.Inputs, error) {
	for _, m := range e.Models() {
		if m.Name != model {
			continue
		}
		in := engine.Inputs{}
		for _, v := range m.Inputs {
			if v.DType != ort.Float32 {
				closeInputs(in)
				return nil, fmt.Errorf("%s: input %s is %s; this example feeds float32 only", model, v.Name, v.DType)
			}
			shape, n := make([]int64, len(v.Shape)), int64(1)
			for i, d := range v.Shape {
				shape[i] = max(d, 1)
				n *= shape[i]
			}
			t, err := ort.CopyTensor(shape, make([]float32, n))
			if err != nil {
				closeInputs(in)
				return nil, err
			}
			in[v.Name] = t
		}
		return in, nil
	}
	return nil, fmt.Errorf("no model %q", model)
}

func closeInputs(in engine.Inputs) { _ = ort.CloseAll(in) }
