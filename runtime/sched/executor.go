package sched

import "context"

// SeqID identifies a sequence for its whole life, across preemptions. It is
// also the request id in its Timeline.
type SeqID uint64

// Executor runs model work on the one device. The scheduler calls it from a
// single goroutine (its device loop), never concurrently, so an
// implementation needs no locking for calls made by one Scheduler. The
// Executor owns the KV cache: the scheduler only asks whether sequences fit
// and tells it when to let them go.
type Executor interface {
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
	// and for each prefill chunk with Last set, in any order. An executor
	// that cannot pad decode rows and prefill chunks into one run may run
	// them as consecutive runs; the step is the unit the scheduler bounds.
	// An error fails every sequence of the batch.
	Step(ctx context.Context, b *Batch) (StepResult, error)
	// Infer runs one-shot inputs of one model as one batch and returns one
	// output per input, in order.
	Infer(ctx context.Context, model string, inputs []any) ([]any, error)
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
	Sampling any
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

// Sampled is one sampled token. Stop means the sequence ends here (end of
// sequence or a stop rule); the token is then not emitted.
type Sampled struct {
	Seq   SeqID
	Token int32
	Stop  bool
}
