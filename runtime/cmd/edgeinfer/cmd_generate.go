//go:build cgo

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
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
	model     string
	store     string
	threads   int
	providers string
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.model, "model", "", "bundle directory, or NAME[@VERSION] with --store")
	fs.StringVar(&m.store, "store", "", "offline model store (bbolt file) that --model names a model in")
	fs.IntVar(&m.threads, "threads", 2, "ONNX Runtime intra-op threads")
	fs.StringVar(&m.providers, "provider", "", "execution providers to try in order, e.g. cuda,cpu (default: the full chain)")
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
	maxTokens := fs.Int("max-tokens", 128, "tokens to generate at most (0 = the bundle's max_new_tokens, else the context)")
	seed := fs.Uint64("seed", 0, "sampling seed")
	temp := fs.Float64("temperature", 0, "sampling temperature (0 = greedy); without any sampling flag the bundle's generation defaults apply")
	topK := fs.Int("top-k", 0, "top-k filter (0 = off)")
	topP := fs.Float64("top-p", 0, "top-p filter (0 = off)")
	rep := fs.Float64("repetition-penalty", 0, "repetition penalty (1 = off)")
	stop := fs.String("stop", "", "comma-separated stop strings")
	chat := fs.Bool("chat", false, "send --prompt as a user turn through the model's chat template (as edgeinfer serve does), stopping at its turn end")
	system := fs.String("system", "", "with --chat: a system turn before the prompt")
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
	opts := engine.GenerateOptions{MaxTokens: *maxTokens}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "seed", "temperature", "top-k", "top-p", "repetition-penalty":
			opts.Sampling = &engine.Sampling{Temperature: float32(*temp), TopK: *topK, TopP: float32(*topP),
				RepetitionPenalty: float32(*rep), Seed: *seed}
		}
	})
	if *stop != "" {
		opts.Stop = strings.Split(*stop, ",")
	}
	var s *engine.Stream
	if *chat {
		msgs := []engine.ChatMessage{{Role: "user", Content: *prompt}}
		if *system != "" {
			msgs = append([]engine.ChatMessage{{Role: "system", Content: *system}}, msgs...)
		}
		s = e.Chat(ctx, name, msgs, opts)
	} else {
		fmt.Fprint(stdout, *prompt)
		s = e.Generate(ctx, name, *prompt, opts)
	}
	for tok, err := range s.Tokens() {
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, tok.Text)
	}
	fmt.Fprintln(stdout)
	sum := s.Summary()
	fmt.Fprintf(stdout, "ttft_ms=%.2f tpot_ms=%.2f tokens=%d prompt_tokens=%d finish=%s provider=%s\n",
		ms(sum.TTFT), ms(sum.TPOT), sum.OutputTokens, sum.PromptTokens, sum.Finish, e.Models()[0].Provider)
	return sum.Err
}

// spec names the model of the flags: a bundle directory, or a reference
// into --store.
func (m *modelFlags) spec() engine.ModelSpec {
	if m.store != "" {
		return engine.ModelSpec{Ref: m.model}
	}
	return engine.ModelSpec{Dir: m.model}
}

func openEngine(ctx context.Context, mf modelFlags) (*engine.Engine, string, error) {
	chain, err := ort.ParseProviders(mf.providers)
	if err != nil {
		return nil, "", fmt.Errorf("%w: --provider: %v", errUsage, err)
	}
	e, err := engine.Open(ctx, engine.Config{
		Models:  []engine.ModelSpec{mf.spec()},
		Store:   mf.store,
		Session: ort.Options{IntraOpThreads: mf.threads, Providers: chain},
	})
	if err != nil {
		return nil, "", err
	}
	return e, e.Models()[0].Name, nil
}
