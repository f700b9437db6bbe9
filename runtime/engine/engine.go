package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/llm"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/sched"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// Engine is the SDK's public façade: the models opened on this device, one
// scheduler sharing the device between every request, and the records of
// what happened to each request.
//
// An Engine is safe for concurrent use by any number of goroutines.
type Engine struct {
	cfg    Config
	log    *slog.Logger
	s      *sched.Scheduler
	x      *mux
	models map[string]*modelEntry

	closeOnce sync.Once
	closeErr  error
}

type modelEntry struct {
	info    ModelInfo
	decoder *llm.Model
	oneshot *oneshot
	tok     *tokenizer.Tokenizer
}

// Open loads every model of cfg and starts the scheduler. Nothing in Open or
// later touches the network.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{cfg: cfg, log: log, models: map[string]*modelEntry{},
		x: &mux{decoders: map[string]*llm.Model{}, oneshots: map[string]*oneshot{}, owner: map[sched.SeqID]*llm.Model{}}}
	for _, spec := range cfg.Models {
		if err := e.open(ctx, spec); err != nil {
			return nil, errors.Join(err, e.closeModels())
		}
	}
	scfg := cfg.Sched
	s, err := sched.New(e.x, scfg, sched.WithLogger(log))
	if err != nil {
		return nil, errors.Join(err, e.closeModels())
	}
	e.s = s
	return e, nil
}

func (e *Engine) open(ctx context.Context, spec ModelSpec) error {
	start := time.Now()
	var b *bundle.Bundle
	var err error
	switch fi, serr := os.Stat(spec.Dir); {
	case spec.Ref != "":
		b, err = ModelBundle(ctx, e.cfg.Store, spec.Ref)
	case serr == nil && !fi.IsDir() && strings.HasSuffix(spec.Dir, ".onnx"):
		return e.openOneshotFile(ctx, spec, start)
	default:
		b, err = bundle.Load(spec.Dir)
	}
	if err != nil {
		return fmt.Errorf("engine: open %s%s: %w", spec.Dir, spec.Ref, err)
	}
	name := spec.Name
	if name == "" {
		name = b.Manifest.Name
	}
	if _, dup := e.models[name]; dup {
		return fmt.Errorf("%w: model name %q opened twice", ErrConfig, name)
	}
	ent := &modelEntry{info: infoOf(name, b)}
	switch b.Manifest.Kind {
	case bundle.KindDecoder:
		// A chunk never exceeds the context, so Config.FIFO's "whole prompt"
		// chunk (1<<30) must not size the step buffers.
		chunk := max(e.cfg.Sched.ChunkSize, 256, e.cfg.Sched.TokenBudget)
		if g := b.Manifest.Geometry; g != nil && g.MaxPositions > 0 {
			chunk = min(chunk, max(g.MaxPositions, 256))
		}
		m, err := llm.Load(ctx, b, llm.Options{
			Session: e.cfg.Session, KVBudgetBytes: e.cfg.KVBudgetBytes,
			DisablePrefixCache: e.cfg.DisablePrefixCache, KVPrefault: e.cfg.KVPrefault,
			KVDisableHugePages: e.cfg.KVDisableHugePages,
			MaxBatch:           max(e.cfg.Sched.MaxBatch, 8), MaxChunk: chunk,
			Logger: e.log,
		})
		if err != nil {
			return err
		}
		ent.decoder = m
		e.x.decoders[name] = m
		ent.info.setSession(m.Session())
		kc := m.Cache().Config()
		ent.info.KV = &kc
		if p := b.TokenizerPath(); p != "" {
			if ent.tok, err = tokenizer.Load(p); err != nil {
				return fmt.Errorf("engine: %s tokenizer: %w", name, err)
			}
		}
	default:
		s, err := ort.NewSessionFromFile(ctx, b.ModelPath(), e.cfg.Session)
		if err != nil {
			return fmt.Errorf("engine: open %s: %w", name, err)
		}
		ent.oneshot = newOneshot(name, s)
		e.x.oneshots[name] = ent.oneshot
		ent.info.setSession(s)
	}
	ent.info.LoadTime = time.Since(start)
	e.models[name] = ent
	e.log.Info("model opened", "name", name, "kind", ent.info.Kind, "provider", ent.info.Provider, "load", ent.info.LoadTime)
	return nil
}

func (e *Engine) openOneshotFile(ctx context.Context, spec ModelSpec, start time.Time) error {
	name := spec.Name
	if name == "" {
		name = strings.TrimSuffix(spec.Dir[strings.LastIndex(spec.Dir, "/")+1:], ".onnx")
	}
	s, err := ort.NewSessionFromFile(ctx, spec.Dir, e.cfg.Session)
	if err != nil {
		return fmt.Errorf("engine: open %s: %w", spec.Dir, err)
	}
	ent := &modelEntry{info: ModelInfo{Name: name, Kind: "oneshot", Path: spec.Dir}, oneshot: newOneshot(name, s)}
	ent.info.setSession(s)
	ent.info.LoadTime = time.Since(start)
	e.x.oneshots[name] = ent.oneshot
	e.models[name] = ent
	return nil
}

// GenerateOptions configures one generation request.
type GenerateOptions struct {
	Sampling llm.SamplingParams
	// MaxTokens bounds the output; 0 means the model's default (its
	// generation config), else 256.
	MaxTokens int
	// Stop strings end the output; they are never emitted, even when they
	// span tokens. The request is recorded as completed.
	Stop []string
	// Class is the priority class; the zero value is interactive.
	Class sched.Class
	// SLO is what the request must meet; zero fields are unbounded.
	SLO sched.SLO
	// FailFast refuses the request at once (sched.ErrOverloaded with a
	// retry-after) when its TTFT SLO cannot be met.
	FailFast bool
}

// Token is one generated token: its id, its text (complete UTF-8 only: a
// character split over tokens arrives with the token that completes it),
// its index in the output and when it was sampled.
type Token struct {
	ID    int32
	Text  string
	Index int
	Time  time.Time
}

// Generate encodes prompt with the model's tokenizer and streams the
// generated tokens. Breaking out of the loop or cancelling ctx ends the
// request within one step and frees its KV blocks.
func (e *Engine) Generate(ctx context.Context, model, prompt string, opts GenerateOptions) iter.Seq2[Token, error] {
	ent, ok := e.models[model]
	if !ok || ent.decoder == nil {
		return errSeq(fmt.Errorf("%w: %q is not an open decoder", ErrUnknownModel, model))
	}
	if ent.tok == nil {
		return errSeq(fmt.Errorf("%w: %q (use GenerateTokens)", ErrNoTokenizer, model))
	}
	ids := ent.tok.EncodeWith(prompt, tokenizer.EncodeOptions{AddSpecialTokens: true, SplitSpecialTokens: true})
	p := make([]int32, len(ids))
	for i, id := range ids {
		p[i] = int32(id)
	}
	return e.generate(ctx, ent, model, p, opts)
}

// GenerateTokens is Generate over token ids (Token.Text is filled when the
// model has a tokenizer).
func (e *Engine) GenerateTokens(ctx context.Context, model string, prompt []int32, opts GenerateOptions) iter.Seq2[Token, error] {
	ent, ok := e.models[model]
	if !ok || ent.decoder == nil {
		return errSeq(fmt.Errorf("%w: %q is not an open decoder", ErrUnknownModel, model))
	}
	return e.generate(ctx, ent, model, prompt, opts)
}

func (e *Engine) generate(ctx context.Context, ent *modelEntry, model string, prompt []int32, opts GenerateOptions) iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		maxTok := opts.MaxTokens
		if maxTok == 0 {
			maxTok = 256
			if g := ent.decoder.Generation(); g.MaxNewTokens > 0 {
				maxTok = g.MaxNewTokens
			}
		}
		st, err := e.s.Submit(ctx, sched.Request{
			Model: model, Class: opts.Class, Prompt: prompt, MaxTokens: maxTok,
			SLO: opts.SLO, FailFast: opts.FailFast, Sampling: opts.Sampling,
		})
		if err != nil {
			yield(Token{}, err)
			return
		}
		defer st.Cancel()
		var dec *tokenizer.StreamDecoder
		if ent.tok != nil {
			dec = ent.tok.NewStreamDecoder()
		}
		stop := llm.NewStopMatcher(opts.Stop)
		for t, err := range st.Tokens() {
			if err != nil {
				yield(Token{}, err)
				return
			}
			tok := Token{ID: t.ID, Index: t.Index, Time: t.Time}
			if dec != nil {
				piece, err := dec.Add(int(t.ID))
				if err != nil {
					yield(Token{}, fmt.Errorf("engine: decode token %d: %w", t.ID, err))
					return
				}
				text, stopped := stop.Push(piece)
				tok.Text = text
				if stopped {
					st.Stop() // recorded as completed, not cancelled
					if text != "" {
						yield(tok, nil)
					}
					return
				}
			}
			if !yield(tok, nil) {
				return
			}
		}
		if dec != nil {
			if tail := stop.Flush() + dec.Flush(); tail != "" {
				yield(Token{ID: -1, Text: tail, Index: -1, Time: time.Now()}, nil)
			}
		}
	}
}

// Infer runs a one-shot model on inputs through the scheduler's dynamic
// batching. The caller closes the returned tensors.
func (e *Engine) Infer(ctx context.Context, model string, inputs Inputs, class sched.Class) (Outputs, error) {
	if ent, ok := e.models[model]; !ok || ent.oneshot == nil {
		return nil, fmt.Errorf("%w: %q is not an open one-shot model", ErrUnknownModel, model)
	}
	res, err := e.s.Infer(ctx, sched.InferRequest{Model: model, Class: class, Input: inputs})
	if err != nil {
		return nil, err
	}
	out, _ := res.Output.(Outputs)
	return out, nil
}

// Tokenizer returns a decoder's tokenizer, or nil.
func (e *Engine) Tokenizer(model string) *tokenizer.Tokenizer {
	if ent, ok := e.models[model]; ok {
		return ent.tok
	}
	return nil
}

// Models describes the open models (for reports' version matrix).
func (e *Engine) Models() []ModelInfo {
	out := make([]ModelInfo, 0, len(e.models))
	for _, ent := range e.models {
		out = append(out, ent.info)
	}
	return out
}

// Stats is a snapshot of the engine: the scheduler's counters and each
// decoder's KV cache.
type Stats struct {
	Sched sched.Stats
	KV    map[string]kvcache.Stats
}

// Stats is cheap and safe to call from any goroutine.
func (e *Engine) Stats() Stats {
	st := Stats{Sched: e.s.Stats(), KV: map[string]kvcache.Stats{}}
	for name, ent := range e.models {
		if ent.decoder != nil {
			st.KV[name] = ent.decoder.Cache().Stats()
		}
	}
	return st
}

// Records drains the timelines of finished requests (every request,
// rejected and timed-out ones included) for the metrics recorder.
func (e *Engine) Records() []sched.Timeline { return e.s.Records() }

// SchedConfig is the scheduler's effective configuration.
func (e *Engine) SchedConfig() sched.Config { return e.s.Config() }

// Close drains running requests until ctx ends, then cancels the rest,
// joins the scheduler and frees every model. It is idempotent.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.closeErr = errors.Join(e.s.Close(ctx), e.closeModels())
	})
	return e.closeErr
}

func (e *Engine) closeModels() error {
	var errs []error
	for _, ent := range e.models {
		if ent.decoder != nil {
			errs = append(errs, ent.decoder.Close())
		}
		if ent.oneshot != nil {
			errs = append(errs, ent.oneshot.sess.Close())
		}
	}
	return errors.Join(errs...)
}

func errSeq(err error) iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) { yield(Token{}, err) }
}
