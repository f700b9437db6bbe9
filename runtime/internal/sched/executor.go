package sched

import (
	"context"
	"fmt"
	"time"
)

// SeqID identifies a sequence for its whole life, across preemptions. It is
// also the request id in its Timeline.
type SeqID uint64

// Decoder runs generation work on the one device. The scheduler calls it
// from a single goroutine (its device loop), never concurrently, so an
// implementation needs no locking for calls made by one Scheduler. The
// Decoder owns the KV cache: the scheduler only asks whether sequences fit
// and tells it when to let them go.
type Decoder interface {
	// Admit registers a sequence and reserves KV for all of seq.Tokens plus
	// room for seq.Reserve more, or returns an error wrapping ErrNoCapacity
	// holding nothing. It returns how many leading tokens are already cached
	// (a prefix-cache hit) and need no prefill; the scheduler clamps that to
	// len(seq.Tokens)−1 because the last token must run to produce logits.
	// A resumed (preempted) sequence is admitted again with its prompt and
	// the tokens generated so far. Any other error fails the request.
	Admit(ctx context.Context, seq Sequence) (cached int, err error)
	// Extend makes room for n more tokens of an admitted sequence, or
	// returns an error wrapping ErrNoCapacity (then the scheduler preempts
	// someone and asks again, or preempts this one).
	Extend(id SeqID, n int) error
	// Release frees everything held for the sequence: it finished, was
	// cancelled, or is preempted (then it will be admitted again later).
	Release(id SeqID)
	// Step runs one step: every row of b.Decode (one token each) and every
	// chunk of b.Prefill. It returns one sampled token for each decode row
	// and for each prefill chunk with Last set, in any order. A decoder
	// that cannot pad decode rows and prefill chunks into one run may run
	// them as consecutive runs; the step is the unit the scheduler bounds.
	// An error fails every sequence of the batch.
	Step(ctx context.Context, b *Batch) (StepResult, error)
}

// Maintainer is a Decoder with upkeep to do between steps, off the
// request path (the prefix cache's persistence): the device loop calls
// Maintain when it goes idle and, while busy, at most every MaintainEvery,
// from the loop goroutine like every other Decoder method.
type Maintainer interface {
	Maintain(now time.Time)
}

// MaintainEvery is how often a busy device loop calls Maintain.
const MaintainEvery = 10 * time.Second

// Oneshot runs one-shot models (vision, audio) on the device, P being their
// payload. Like Decoder, it is called from the device loop only.
type Oneshot[P any] interface {
	// Infer runs one-shot inputs of one model as one batch and returns one
	// output per input, in order.
	Infer(ctx context.Context, model string, inputs []P) ([]P, error)
}

// Sampling chooses the next token from a row of logits; the scheduler
// carries it from Request to Sequence untouched. The zero value is greedy
// decoding (arg-max), which is deterministic.
//
// The order of operations follows Hugging Face transformers' logits
// processors: penalties on raw logits, then temperature, then top-k, top-p and
// min-p filtering of the resulting distribution.
type Sampling struct {
	// Temperature divides the logits; 0 means greedy.
	Temperature float32 `json:"temperature,omitempty"`
	// TopK keeps the K most likely tokens; 0 keeps all.
	TopK int `json:"top_k,omitempty"`
	// TopP keeps the smallest set whose probability reaches P; 0 or 1 keeps all.
	TopP float32 `json:"top_p,omitempty"`
	// MinP drops tokens whose probability is below MinP × the top probability.
	MinP float32 `json:"min_p,omitempty"`
	// RepetitionPenalty (CTRL-style, >1 discourages) applies to every token
	// already in the prompt or output; 0 or 1 disables it.
	RepetitionPenalty float32 `json:"repetition_penalty,omitempty"`
	// PresencePenalty is subtracted once from every generated token's logit.
	PresencePenalty float32 `json:"presence_penalty,omitempty"`
	// FrequencyPenalty is subtracted once per occurrence in the output.
	FrequencyPenalty float32 `json:"frequency_penalty,omitempty"`
	// Seed makes sampling reproducible: the same seed, model and prompt give
	// the same tokens.
	Seed uint64 `json:"seed,omitempty"`
}

// Sequence describes a sequence to Admit.
type Sequence struct {
	ID    SeqID
	Model string
	// Tokens is the prompt followed by the tokens generated so far (non-empty
	// only on resume after preemption). The Executor may keep the slice; the
	// scheduler never writes to it afterwards.
	Tokens []int32
	// PromptLen is how many of Tokens are prompt; the rest were generated.
	PromptLen int
	// Reserve is the extra room (in tokens) that must fit beside Tokens for
	// admission, so a new sequence does not run dry on its first decodes.
	Reserve int
	// Sampling is Request.Sampling, passed through.
	Sampling Sampling
	// Attach is Request.Attach, passed through.
	Attach any
}

// Batch is the work of one step, for one model. Decode rows come first in the
// scheduler's policy: every running decode is served before any prefill.
type Batch struct {
	Model   string
	Decode  []DecodeRow
	Prefill []PrefillChunk
}

// Tokens is the number of tokens the step computes.
func (b *Batch) Tokens() int {
	n := len(b.Decode)
	for i := range b.Prefill {
		n += len(b.Prefill[i].Tokens)
	}
	return n
}

// DecodeRow asks for the next token of a sequence whose KV holds Pos tokens:
// Token (its latest token) is computed at position Pos.
type DecodeRow struct {
	Seq   SeqID
	Token int32
	Pos   int
}

// PrefillChunk computes Tokens at positions Pos, Pos+1, … of a sequence.
// When Last is set the chunk ends the sequence's known tokens and the step
// samples its next token.
type PrefillChunk struct {
	Seq    SeqID
	Tokens []int32
	Pos    int
	Last   bool
}

// StepResult holds the tokens sampled by a step.
type StepResult struct {
	Tokens []Sampled
}

// Sampled is one sampled token. A Stop other than FinishNone ends the
// sequence here (FinishStop for end of sequence, FinishContextLength when the
// context has no room for it); the token is then not emitted.
type Sampled struct {
	Seq   SeqID
	Token int32
	Stop  Finish
}

// Validate reports parameters out of their documented range.
func (p Sampling) Validate() error {
	nan := func(f float32) bool { return f != f }
	switch {
	case p.Temperature < 0 || nan(p.Temperature):
		return fmt.Errorf("temperature %v must be ≥ 0", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("top_k %d must be ≥ 0", p.TopK)
	case p.TopP < 0 || p.TopP > 1 || nan(p.TopP):
		return fmt.Errorf("top_p %v must be in [0, 1]", p.TopP)
	case p.MinP < 0 || p.MinP > 1 || nan(p.MinP):
		return fmt.Errorf("min_p %v must be in [0, 1]", p.MinP)
	case p.RepetitionPenalty < 0 || nan(p.RepetitionPenalty):
		return fmt.Errorf("repetition_penalty %v must be ≥ 0", p.RepetitionPenalty)
	}
	return nil
}
