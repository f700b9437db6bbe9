package metrics

import "time"

// Outcome is how a request ended. Every request ends with exactly one.
type Outcome string

// Outcomes. The zero value is not a valid outcome of a finished request.
const (
	Completed Outcome = "completed"
	Cancelled Outcome = "cancelled" // the caller gave up (context cancelled)
	Rejected  Outcome = "rejected"  // refused at admission (overload, SLO unreachable)
	TimedOut  Outcome = "timed_out" // a deadline passed before completion
	Failed    Outcome = "failed"    // an execution error
)

// Outcomes lists every outcome in a stable order (reports iterate it).
var Outcomes = []Outcome{Completed, Cancelled, Rejected, TimedOut, Failed}

// Request classes used by the scheduler's priorities. Class is a plain
// string so callers may add their own.
const (
	ClassRealtime    = "realtime"
	ClassInteractive = "interactive"
	ClassBatch       = "batch"
)

// SLO holds a request's service-level objectives. A zero duration means
// unbounded: that objective is always met.
type SLO struct {
	TTFT time.Duration `json:"ttft"` // time to first token
	TPOT time.Duration `json:"tpot"` // mean time per output token after the first
	E2E  time.Duration `json:"e2e"`  // deadline for the whole request
}

// Timeline is the life of one request, stamped by the scheduler. It is plain
// data: the zero time of an event means it did not happen. Token offsets are
// kept relative to Arrived (8 bytes each) in a slice the caller may
// preallocate with NewTimeline, so stamping a token does not allocate.
//
// A Timeline is not safe for concurrent use: one goroutine (the scheduler
// loop) stamps it, then hands it to a Recorder, which takes ownership.
type Timeline struct {
	ID uint64 `json:"id"`
	// Model is the model the request ran on, Kind "generate" or "infer".
	Model          string    `json:"model,omitempty"`
	Kind           string    `json:"kind,omitempty"`
	Class          string    `json:"class"`
	Arrived        time.Time `json:"arrived"`
	Admitted       time.Time `json:"admitted"`
	FirstScheduled time.Time `json:"first_scheduled"`
	FirstToken     time.Time `json:"first_token"`
	Finished       time.Time `json:"finished"`
	// Tokens holds, for every output token in order, its emission time as
	// an offset from Arrived. Durations from time.Time.Sub keep the
	// monotonic clock reading, so offsets are immune to wall-clock steps.
	Tokens  []time.Duration `json:"tokens"`
	Outcome Outcome         `json:"outcome"`
	// Finish says why a generation ended ("stop", "length",
	// "context_length", …; see the engine's FinishReason); Err is the error
	// text of a request that did not complete.
	FinishReason string `json:"finish_reason,omitempty"`
	Err          string `json:"error,omitempty"`
	Preempted    int    `json:"preempted"`
	PromptTokens int    `json:"prompt_tokens"`
	// CachedTokens is the prompt prefix found in the KV cache (no prefill).
	CachedTokens int `json:"cached_tokens,omitempty"`
	// BatchSize is the one-shot batch the request ran in.
	BatchSize int `json:"batch_size,omitempty"`
	// OutputTokens counts generated tokens. Token keeps it equal to
	// len(Tokens); a caller that does not stamp every token (a one-shot
	// model) may set it directly.
	OutputTokens int `json:"output_tokens"`
	SLO          SLO `json:"slo"`
	// FailFast marks a request that asked to be refused at once rather
	// than queued past its TTFT objective.
	FailFast bool `json:"fail_fast,omitempty"`
	// RefusedInQueue marks a fail-fast request refused after a wait in the
	// queue, once it could no longer meet its objective (outcome rejected).
	RefusedInQueue bool `json:"refused_in_queue,omitempty"`
	// Pre and Post are the time a one-shot model's pre- and
	// post-processing plugins took for this request, outside
	// Arrived..Finished (the model's queue and run); zero without plugins.
	Pre  time.Duration `json:"pre_ns,omitempty"`
	Post time.Duration `json:"post_ns,omitempty"`
	// LoadTime is the model load the request waited for before Arrived:
	// set on the first request of a model loaded on demand (the engine's
	// memory budget and keep-alive), zero otherwise.
	LoadTime time.Duration `json:"load_ns,omitempty"`
}

// NewTimeline returns a timeline that arrived at arrived, with room for
// maxTokens token stamps so that Token never reallocates.
func NewTimeline(id uint64, class string, arrived time.Time, maxTokens int) *Timeline {
	return &Timeline{ID: id, Class: class, Arrived: arrived, Tokens: make([]time.Duration, 0, max(maxTokens, 0))}
}

// Token records one output token emitted at at. The first call also sets
// FirstToken.
func (t *Timeline) Token(at time.Time) {
	if t.FirstToken.IsZero() {
		t.FirstToken = at
	}
	t.Tokens = append(t.Tokens, at.Sub(t.Arrived))
	t.OutputTokens++
}

// Finish records the end of the request.
func (t *Timeline) Finish(at time.Time, o Outcome) {
	t.Finished = at
	t.Outcome = o
}

// Queue is first scheduled − arrived; ok is false if never scheduled.
func (t *Timeline) Queue() (d time.Duration, ok bool) {
	return since(t.Arrived, t.FirstScheduled)
}

// TTFT is first token − arrived; ok is false if no token was produced.
func (t *Timeline) TTFT() (d time.Duration, ok bool) {
	return since(t.Arrived, t.FirstToken)
}

// E2E is finished − arrived; ok is false if the request has not finished.
func (t *Timeline) E2E() (d time.Duration, ok bool) {
	return since(t.Arrived, t.Finished)
}

// TPOT is (last token − first token)/(n−1) over the stamped tokens; ok is
// false with fewer than two stamps.
func (t *Timeline) TPOT() (d time.Duration, ok bool) {
	n := len(t.Tokens)
	if n < 2 {
		return 0, false
	}
	return (t.Tokens[n-1] - t.Tokens[0]) / time.Duration(n-1), true
}

// ITL calls yield with each gap between consecutive tokens, in order, and
// stops early if yield returns false. It is an iter.Seq[time.Duration].
func (t *Timeline) ITL(yield func(time.Duration) bool) {
	for i := 1; i < len(t.Tokens); i++ {
		if !yield(t.Tokens[i] - t.Tokens[i-1]) {
			return
		}
	}
}

// MetSLO reports whether the request completed and met every bounded
// objective. Requests that did not complete — including client
// cancellations, conservatively — never meet their SLOs. TPOT is judged
// only when it is defined (two or more tokens).
func (t *Timeline) MetSLO() bool {
	if t.Outcome != Completed {
		return false
	}
	if t.SLO.TTFT > 0 {
		d, ok := t.TTFT()
		if !ok || d > t.SLO.TTFT {
			return false
		}
	}
	if t.SLO.TPOT > 0 {
		if d, ok := t.TPOT(); ok && d > t.SLO.TPOT {
			return false
		}
	}
	if t.SLO.E2E > 0 {
		d, ok := t.E2E()
		if !ok || d > t.SLO.E2E {
			return false
		}
	}
	return true
}

func since(from, to time.Time) (time.Duration, bool) {
	if from.IsZero() || to.IsZero() {
		return 0, false
	}
	return to.Sub(from), true
}
