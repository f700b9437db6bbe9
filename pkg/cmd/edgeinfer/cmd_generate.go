package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/llm"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

func init() {
	register(&command{
		name:    "generate",
		summary: "stream text from a decoder bundle, then print TTFT and TPOT",
		run:     runGenerate,
	})
	register(&command{
		name:    "perplexity",
		summary: "perplexity of a decoder bundle on a text file",
		run:     runPerplexity,
	})
}

// modelFlags are the flags that name a model and how to run it.
type modelFlags struct {
	model   string
	store   string
	threads int
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.model, "model", "", "bundle directory, or NAME[@VERSION] with --store")
	fs.StringVar(&m.store, "store", "", "offline model store (bbolt file) that --model names a model in")
	fs.IntVar(&m.threads, "threads", 2, "ONNX Runtime intra-op threads")
}

func (m *modelFlags) validate() error {
	if m.model == "" {
		return fmt.Errorf("%w: --model is required", errUsage)
	}
	if m.store != "" {
		return needStore(m.store)
	}
	return needBundleDir(m.model)
}

// bundle loads the model's bundle (verifying its digests), exporting it
// from the store the first time.
func (m *modelFlags) bundle(ctx context.Context) (*bundle.Bundle, error) {
	if m.store == "" {
		return bundle.Load(m.model)
	}
	return engine.ModelBundle(ctx, m.store, m.model)
}

func runGenerate(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("generate")
	var mf modelFlags
	mf.register(fs)
	prompt := fs.String("prompt", "", "prompt text")
	maxTokens := fs.Int("max-tokens", 128, "tokens to generate at most")
	seed := fs.Uint64("seed", 0, "sampling seed")
	temp := fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
	topK := fs.Int("top-k", 0, "top-k filter (0 = off)")
	topP := fs.Float64("top-p", 0, "top-p filter (0 = off)")
	rep := fs.Float64("repetition-penalty", 0, "repetition penalty (1 = off)")
	stop := fs.String("stop", "", "comma-separated stop strings")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := mf.validate(); err != nil {
		return err
	}
	if *prompt == "" {
		return fmt.Errorf("%w: --prompt is required", errUsage)
	}
	e, name, err := openEngine(ctx, mf)
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	opts := engine.GenerateOptions{
		MaxTokens: *maxTokens,
		Sampling: llm.SamplingParams{Temperature: float32(*temp), TopK: *topK, TopP: float32(*topP),
			RepetitionPenalty: float32(*rep), Seed: *seed},
	}
	if *stop != "" {
		opts.Stop = strings.Split(*stop, ",")
	}
	fmt.Fprint(stdout, *prompt)
	for tok, err := range e.Generate(ctx, name, *prompt, opts) {
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, tok.Text)
	}
	fmt.Fprintln(stdout)
	recs := e.Records()
	if len(recs) == 0 {
		return errors.New("no request record")
	}
	r := recs[len(recs)-1]
	ttft := r.TTFT()
	tpot := r.TPOT()
	fmt.Fprintf(stdout, "ttft_ms=%.2f tpot_ms=%.2f tokens=%d prompt_tokens=%d outcome=%s provider=%s\n",
		ms(ttft), ms(tpot), r.OutputTokens(), r.PromptTokens, r.Outcome, e.Models()[0].Provider)
	return nil
}

func openEngine(ctx context.Context, mf modelFlags) (*engine.Engine, string, error) {
	spec := engine.ModelSpec{Dir: mf.model}
	if mf.store != "" {
		spec = engine.ModelSpec{Ref: mf.model}
	}
	e, err := engine.Open(ctx, engine.Config{
		Models:  []engine.ModelSpec{spec},
		Store:   mf.store,
		Session: ort.Options{IntraOpThreads: mf.threads},
	})
	if err != nil {
		return nil, "", err
	}
	return e, e.Models()[0].Name, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
