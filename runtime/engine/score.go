package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/internal/llm"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// Scorer is the offline entry point to a decoder: perplexity of a text,
// greedy decoding and the logits behind it, one sequence at a time on the
// calling goroutine, with no scheduler. The CLI's perplexity and the
// quantisation quality reports use it; serving uses an Engine.
//
// A Scorer is not safe for concurrent use.
type Scorer struct {
	m   *llm.Model
	tok *tokenizer.Tokenizer
	b   *bundle.Bundle
}

// ScorerOptions configure OpenScorer. The KV cache is sized for one
// sequence of the model's whole context unless KV.BudgetBytes says more.
type ScorerOptions struct {
	Session ort.Options `json:"session"`
	KV      KVOptions   `json:"kv"`
	// Store resolves a ModelSpec.Ref.
	Store string `json:"store,omitempty"`
}

// OpenScorer loads one decoder for offline scoring.
func OpenScorer(ctx context.Context, spec ModelSpec, opts ScorerOptions) (*Scorer, error) {
	if err := spec.validate(opts.Store != ""); err != nil {
		return nil, err
	}
	var b *bundle.Bundle
	var err error
	if spec.Ref != "" {
		b, err = ModelBundle(ctx, opts.Store, spec.Ref)
	} else {
		b, err = bundle.Load(spec.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("engine: open %s%s: %w", spec.Dir, spec.Ref, err)
	}
	if b.Manifest.Kind != bundle.KindDecoder {
		return nil, fmt.Errorf("%w: %s is a %s model, not a decoder", ErrInvalidRequest, b.Dir, b.Manifest.Kind)
	}
	// The prefix cache stays on unless opts say otherwise: Greedy over
	// growing prefixes of one text (a quality report) then recomputes at
	// most one block per step.
	m, err := llm.Load(ctx, b, llm.Options{Session: opts.Session, KV: opts.KV.internal(), MaxBatch: 1})
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", b.Dir, err)
	}
	s := &Scorer{m: m, b: b}
	if p := b.TokenizerPath(); p != "" {
		if s.tok, err = tokenizer.Load(p); err != nil {
			return nil, errors.Join(fmt.Errorf("engine: %s tokenizer: %w", b.Dir, err), m.Close())
		}
	}
	return s, nil
}

// Close frees the model.
func (s *Scorer) Close() error { return s.m.Close() }

// Tokenizer is the model's tokenizer, or nil.
func (s *Scorer) Tokenizer() *tokenizer.Tokenizer { return s.tok }

// Bundle is the scored model's bundle.
func (s *Scorer) Bundle() *bundle.Bundle { return s.b }

// MaxPositions is the model's context length.
func (s *Scorer) MaxPositions() int { return s.m.Geometry().MaxPositions }

// Score computes the negative log-likelihood of tokens[1:] given their
// prefixes: the summed NLL in nats and the number of predicted tokens, for
// perplexity = exp(nll/n). tokens must fit the context.
func (s *Scorer) Score(ctx context.Context, tokens []int32) (nll float64, n int, err error) {
	nll, n, err = s.m.Score(ctx, tokens)
	return nll, n, public(err)
}

// Greedy decodes up to maxTokens tokens after prompt by arg-max, stopping
// at an end token. After each yielded token, Logits holds the row it was
// drawn from.
func (s *Scorer) Greedy(ctx context.Context, prompt []int32, maxTokens int) iter.Seq2[int32, error] {
	return func(yield func(int32, error) bool) {
		for t, err := range s.m.Generate(ctx, prompt, llm.GenerateOptions{MaxTokens: maxTokens}) {
			if !yield(t, public(err)) || err != nil {
				return
			}
		}
	}
}

// Logits is the row of logits of the last step (valid until the next).
func (s *Scorer) Logits() []float32 { return s.m.Logits(0) }

// LogProbs is the log-softmax of Logits: each token's log probability
// after the last step, in a fresh slice.
func (s *Scorer) LogProbs() []float32 { return llm.LogSoftmax(s.m.Logits(0)) }
