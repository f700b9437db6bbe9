package sched

import "time"

// Outcome is how a request ended.
type Outcome uint8

// Outcomes. OutcomePending is the zero value, seen only before a request
// finishes.
const (
	OutcomePending Outcome = iota
	OutcomeCompleted
	OutcomeCancelled
	OutcomeRejected
	OutcomeTimedOut
	OutcomeFailed
)

func (o Outcome) String() string {
	switch o {
	case OutcomePending:
		return "pending"
	case OutcomeCompleted:
		return "completed"
	case OutcomeCancelled:
		return "cancelled"
	case OutcomeRejected:
		return "rejected"
	case OutcomeTimedOut:
		return "timed_out"
	case OutcomeFailed:
		return "failed"
	}
	return "unknown"
}

// Finish says why a generation ended: what a caller acts on (a reply cut
// at the context length is not a complete answer). FinishNone is the zero
// value: the sequence goes on.
type Finish uint8

// Finish reasons. The decoder reports FinishStop and FinishContextLength
// (Sampled.Stop); the scheduler sets the others.
const (
	FinishNone          Finish = iota
	FinishStop                 // the model produced an end-of-sequence token
	FinishStopString           // the caller stopped it: a stop string matched (Stream.Stop)
	FinishLength               // MaxTokens reached
	FinishContextLength        // no room for another position in the model's context
	FinishCancelled            // the caller cancelled (or the scheduler closed)
	FinishDeadline             // the request's deadline or context deadline passed
	FinishRejected             // refused at admission (overload, queue full, invalid)
	FinishError                // the executor failed
)

var finishNames = [...]string{"", "stop", "stop_string", "length", "context_length", "cancelled", "deadline", "rejected", "error"}

func (f Finish) String() string {
	if int(f) < len(finishNames) {
		return finishNames[f]
	}
	return "unknown"
}

// finishOf is the reason implied by an outcome when nothing more precise
// was recorded.
func finishOf(o Outcome) Finish {
	switch o {
	case OutcomeCompleted:
		return FinishStop
	case OutcomeCancelled:
		return FinishCancelled
	case OutcomeRejected:
		return FinishRejected
	case OutcomeTimedOut:
		return FinishDeadline
	case OutcomeFailed:
		return FinishError
	}
	return FinishNone
}

// Kind tells generation from one-shot requests in the record.
type Kind uint8

// Request kinds.
const (
	KindGenerate Kind = iota
	KindInfer
)

func (k Kind) String() string {
	if k == KindInfer {
		return "infer"
	}
	return "generate"
}

// Timeline is the record of one request, stamped by the scheduler on the
// device loop. Zero times mean "did not happen" (a rejected request has only
// Arrived and Finished). It is plain data: the metrics package derives queue
// time, TTFT, TPOT, ITL and E2E from it.
type Timeline struct {
	// ID is the request id (the SeqID for generation).
	ID uint64
	// Kind is generation or one-shot.
	Kind Kind
	// Model and Class identify the request.
	Model string
	Class Class
	// SLO is the request's objectives, copied so the record stands alone;
	// FailFast whether the request asked to be refused rather than queued
	// past them.
	SLO      SLO
	FailFast bool
	// RefusedInQueue marks a fail-fast request refused after it had been
	// queued, once it could no longer meet its TTFT objective (outcome
	// rejected, like a refusal at arrival, but after a wait).
	RefusedInQueue bool
	// PromptTokens is the prompt length; CachedTokens the prompt tokens the
	// Executor reported already cached at the first admission (prefix hit).
	PromptTokens int
	CachedTokens int
	// Arrived is when Submit or Infer was called.
	Arrived time.Time
	// Admitted is the first time the Executor accepted the sequence (KV
	// reserved) or the one-shot request entered a batch.
	Admitted time.Time
	// FirstScheduled is the start of the first step the request took part in.
	FirstScheduled time.Time
	// FirstToken is when the first generated token (or the one-shot result)
	// was produced.
	FirstToken time.Time
	// TokenTimes holds the time of every generated token, in order
	// (TokenTimes[0] == FirstToken).
	TokenTimes []time.Time
	// Finished is when the request left the scheduler.
	Finished time.Time
	// Outcome is how it ended; Finish why (for generation); Err the error
	// text when not completed.
	Outcome Outcome
	Finish  Finish
	Err     string
	// Preemptions counts how often its KV was taken back and recomputed.
	Preemptions int
	// BatchSize is the one-shot batch it ran in (0 for generation).
	BatchSize int
	// LoadTime is the model load the request waited for before Arrived
	// (Request.LoadTime).
	LoadTime time.Duration
}

// OutputTokens is the number of generated tokens.
func (t *Timeline) OutputTokens() int { return len(t.TokenTimes) }

// QueueTime is FirstScheduled − Arrived (zero if never scheduled).
func (t *Timeline) QueueTime() time.Duration { return since(t.Arrived, t.FirstScheduled) }

// TTFT is FirstToken − Arrived (zero if no token).
func (t *Timeline) TTFT() time.Duration { return since(t.Arrived, t.FirstToken) }

// E2E is Finished − Arrived.
func (t *Timeline) E2E() time.Duration { return since(t.Arrived, t.Finished) }

// TPOT is (last token − first token)/(n−1); zero with fewer than two tokens.
func (t *Timeline) TPOT() time.Duration {
	n := len(t.TokenTimes)
	if n < 2 {
		return 0
	}
	return t.TokenTimes[n-1].Sub(t.TokenTimes[0]) / time.Duration(n-1)
}

// MetSLO reports whether the request completed within every objective it
// declared.
func (t *Timeline) MetSLO() bool {
	if t.Outcome != OutcomeCompleted {
		return false
	}
	if t.SLO.TTFT > 0 && t.TTFT() > t.SLO.TTFT {
		return false
	}
	if t.SLO.TPOT > 0 && t.TPOT() > t.SLO.TPOT {
		return false
	}
	if t.SLO.Deadline > 0 && t.E2E() > t.SLO.Deadline {
		return false
	}
	return true
}

func since(from, to time.Time) time.Duration {
	if from.IsZero() || to.IsZero() {
		return 0
	}
	return to.Sub(from)
}
