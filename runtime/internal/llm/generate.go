package llm

import (
	"context"
	"fmt"
	"iter"
	"math"

	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
)

// GenerateOptions configures a single-sequence generation.
type GenerateOptions struct {
	Sampling SamplingParams
	// MaxTokens bounds the generated tokens; 0 means until end of sequence
	// or the end of the context.
	MaxTokens int
	// StopTokens end generation (not emitted), besides the model's EOS.
	StopTokens []int32
}

// generateID numbers the sequences of Generate and Score; they count down
// from the top of the id space so they never meet a scheduler's ids.
func (m *Model) generateID() sched.SeqID {
	m.ownIDs++
	return sched.SeqID(math.MaxUint64 - m.ownIDs)
}

// Generate runs one sequence to completion on this model without a
// scheduler: prefill in chunks of Options.MaxChunk, then one decode step per
// token. It yields token ids as they are sampled. Leaving the loop early or
// cancelling ctx frees the sequence's KV blocks.
//
// Generate drives the model from the calling goroutine: do not use it on a
// model a scheduler is driving. Applications use engine.Generate.
func (m *Model) Generate(ctx context.Context, prompt []int32, opts GenerateOptions) iter.Seq2[int32, error] {
	return func(yield func(int32, error) bool) {
		id := m.generateID()
		if _, err := m.Admit(ctx, sched.Sequence{ID: id, Tokens: prompt, PromptLen: len(prompt), Sampling: opts.Sampling}); err != nil {
			yield(0, err)
			return
		}
		defer m.Release(id)
		stop := map[int32]bool{}
		for _, t := range opts.StopTokens {
			stop[t] = true
		}
		kv := m.seqs[uint64(id)].kv
		var res sched.StepResult
		for kv.Computed() < len(prompt) {
			if err := ctx.Err(); err != nil {
				yield(0, err)
				return
			}
			pos := kv.Computed()
			end := min(pos+m.io.maxTokens, len(prompt))
			res.Tokens = res.Tokens[:0]
			chunk := sched.PrefillChunk{Seq: id, Tokens: kv.Tokens()[pos:end], Pos: pos, Last: end == len(prompt)}
			if err := m.prefill(ctx, &chunk, &res); err != nil {
				yield(0, err)
				return
			}
		}
		for n := 0; ; n++ {
			if len(res.Tokens) != 1 {
				yield(0, fmt.Errorf("%w: step returned %d tokens for one sequence", ErrBatch, len(res.Tokens)))
				return
			}
			s := res.Tokens[0]
			if s.Stop != sched.FinishNone || stop[s.Token] {
				return
			}
			if !yield(s.Token, nil) {
				return
			}
			if opts.MaxTokens > 0 && n+1 >= opts.MaxTokens {
				return
			}
			if err := ctx.Err(); err != nil {
				yield(0, err)
				return
			}
			if err := m.Extend(id, 1); err != nil {
				yield(0, err)
				return
			}
			res.Tokens = res.Tokens[:0]
			if err := m.decode(ctx, []sched.DecodeRow{{Seq: id, Token: s.Token, Pos: kv.Computed()}}, &res); err != nil {
				yield(0, err)
				return
			}
		}
	}
}

// Score computes the negative log-likelihood of tokens[1:] given their
// prefixes, feeding the tokens one position at a time (the paged graph
// returns the logits of one position per row). It returns the summed NLL in
// nats and the number of predicted tokens, for perplexity = exp(nll/n).
func (m *Model) Score(ctx context.Context, tokens []int32) (nll float64, n int, err error) {
	if len(tokens) < 2 {
		return 0, 0, nil
	}
	// Only tokens[:n-1] are fed (the last is only predicted), so a window
	// as long as the context fits.
	fed := tokens[:len(tokens)-1]
	id := m.generateID()
	if _, err := m.Admit(ctx, sched.Sequence{ID: id, Tokens: fed, PromptLen: len(fed)}); err != nil {
		return 0, 0, err
	}
	defer m.Release(id)
	kv := m.seqs[uint64(id)].kv
	io := m.io
	for kv.Computed() < len(fed) {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		p := kv.Computed()
		int64s(io.ids, 1)[0], int64s(io.pos, 1)[0], int64s(io.last, 1)[0] = int64(tokens[p]), int64(p), 0
		if io.slots, err = kv.Slots(io.slots[:0], 1); err != nil {
			return 0, 0, err
		}
		if _, err := m.runRows(ctx, m.scoreSeqs(kv), 1); err != nil {
			return 0, 0, err
		}
		nll += -logSoftmaxAt(m.Logits(0), tokens[p+1])
		n++
	}
	return nll, n, nil
}

func (m *Model) scoreSeqs(kv *kvcache.Sequence) []*kvcache.Sequence {
	return []*kvcache.Sequence{kv}
}

// logSoftmaxAt is log p(target) under softmax(logits), computed stably.
func logSoftmaxAt(logits []float32, target int32) float64 {
	return float64(logits[target]) - logSumExp(logits)
}

// LogSoftmax is log softmax(logits), computed stably: each token's log
// probability.
func LogSoftmax(logits []float32) []float32 {
	lse := logSumExp(logits)
	out := make([]float32, len(logits))
	for i, l := range logits {
		out[i] = float32(float64(l) - lse)
	}
	return out
}

// logSumExp is log Σ exp(logits), shifted by the maximum so that nothing
// overflows.
func logSumExp(logits []float32) float64 {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - mx)
	}
	return mx + math.Log(sum)
}
