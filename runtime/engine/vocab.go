package engine

import (
	"fmt"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
)

// Class is a request's priority class. The scheduler serves realtime before
// interactive before batch, may preempt lower classes for higher ones, and
// keeps a queue per class.
type Class uint8

// Classes. The zero value is interactive.
const (
	ClassInteractive Class = iota
	ClassBatch
	ClassRealtime
)

var classNames = [...]string{"interactive", "batch", "realtime"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// ParseClass reads "realtime", "interactive" or "batch" ("" is interactive).
func ParseClass(s string) (Class, error) {
	if s == "" {
		return ClassInteractive, nil
	}
	for i, n := range classNames {
		if n == s {
			return Class(i), nil
		}
	}
	return 0, fmt.Errorf("%w: class %q (want realtime, interactive or batch)", ErrInvalidRequest, s)
}

func (c Class) sched() sched.Class {
	switch c {
	case ClassBatch:
		return sched.ClassBatch
	case ClassRealtime:
		return sched.ClassRealtime
	case ClassInteractive:
		return sched.ClassInteractive
	}
	return sched.Class(255) // refused by the scheduler's validation
}

func classOf(c sched.Class) Class {
	switch c {
	case sched.ClassBatch:
		return ClassBatch
	case sched.ClassRealtime:
		return ClassRealtime
	}
	return ClassInteractive
}

// SLO is what a request must meet; a zero field is unbounded. A request
// that misses one still completes, but does not count towards goodput.
type SLO struct {
	// TTFT bounds the time from arrival to the first token (for one-shot
	// requests: to the result). With FailFast, a request whose predicted
	// TTFT exceeds it is refused at once.
	TTFT time.Duration `json:"ttft,omitempty"`
	// TPOT bounds the mean time per output token after the first; the
	// scheduler sizes batches to keep the tightest running TPOT.
	TPOT time.Duration `json:"tpot,omitempty"`
	// Deadline ends the request (FinishDeadline) when it passes.
	Deadline time.Duration `json:"deadline,omitempty"`
}

// Sampling chooses each next token from the model's logits. The zero value
// is greedy decoding (arg-max), which is deterministic. The order of
// operations follows Hugging Face transformers' logits processors:
// penalties on raw logits, then temperature, then top-k, top-p and min-p.
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
	// the same tokens whatever else is batched with the request.
	Seed uint64 `json:"seed,omitempty"`
}

// Validate reports parameters out of their documented range.
func (s Sampling) Validate() error {
	if err := sched.Sampling(s).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return nil
}

// FinishReason says why a generation ended. A reply cut at MaxTokens or at
// the context length is not a complete answer: the caller can tell.
type FinishReason uint8

// Finish reasons.
const (
	FinishNone          FinishReason = iota // not finished (never in a Summary)
	FinishStop                              // the model produced an end-of-sequence token
	FinishStopString                        // a stop string of GenerateOptions.Stop matched
	FinishLength                            // GenerateOptions.MaxTokens reached
	FinishContextLength                     // the model's context has no room for another token
	FinishCancelled                         // the caller cancelled ctx or left the loop
	FinishDeadline                          // ctx's deadline or SLO.Deadline passed
	FinishRejected                          // refused at admission (overload, invalid request)
	FinishError                             // the model failed; Summary.Err says how
)

// String is the reason's name: "stop", "stop_string", "length",
// "context_length", "cancelled", "deadline", "rejected" or "error".
func (f FinishReason) String() string { return sched.Finish(f).String() }

// Kind tells a generation from a one-shot request.
type Kind uint8

// Request kinds.
const (
	KindGenerate Kind = iota
	KindInfer
)

func (k Kind) String() string { return sched.Kind(k).String() }
