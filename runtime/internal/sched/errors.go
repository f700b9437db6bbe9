package sched

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Errors returned by this package wrap one of these with the
// operation and request that failed, so callers test with errors.Is.
var (
	// ErrClosed is returned by Submit and Infer after Close has begun.
	ErrClosed = errors.New("sched: closed")
	// ErrInvalidConfig is returned by Config.Validate and New.
	ErrInvalidConfig = errors.New("sched: invalid config")
	// ErrInvalidRequest means a request is malformed (no model, empty
	// prompt, negative limits, unknown class).
	ErrInvalidRequest = errors.New("sched: invalid request")
	// ErrOverloaded means the request was refused at once because the
	// scheduler predicts it cannot meet its SLO, or its class queue is full.
	// The error is an *OverloadError carrying a RetryAfter estimate. It is
	// the engine's public sentinel too (engine.ErrOverloaded).
	ErrOverloaded = errors.New("engine: overloaded")
	// ErrQueueFull is wrapped (beside ErrOverloaded) when the bounded queue
	// of the request's class is full.
	ErrQueueFull = errors.New("sched: queue full")
	// ErrNoCapacity is what an Executor returns from Admit or Extend when the
	// KV cache has no room now. The scheduler treats it as transient (it
	// waits or preempts) unless nothing else is running, in which case the
	// request can never fit and fails with it.
	ErrNoCapacity = errors.New("sched: no kv capacity")
	// ErrCancelled ends a stream whose caller cancelled it (ctx, Stream.Cancel,
	// or leaving the token loop early) or that Close cancelled.
	ErrCancelled = errors.New("sched: cancelled")
	// ErrTimeout ends a request whose deadline (SLO.Deadline or the ctx
	// deadline) passed before it completed.
	ErrTimeout = errors.New("sched: timed out")
	// ErrExecutor wraps a failure reported by the Executor, or an Executor
	// that broke its contract (no token for a sequence that needed one).
	ErrExecutor = errors.New("sched: executor failed")
)

// OverloadError is the typed form of ErrOverloaded: it tells the caller how
// long to wait before retrying. errors.Is(err, ErrOverloaded) holds for it, and
// errors.Is(err, ErrQueueFull) too when the queue was full. It is the
// engine's public refusal too (engine.OverloadError is this type), so its
// fields and message speak the engine's words.
type OverloadError struct {
	// Class is the priority class of the refused request: "realtime",
	// "interactive" or "batch".
	Class string
	// Predicted is the predicted time to first token (or to result for
	// one-shot work) had the request been queued; zero when the queue was
	// full.
	Predicted time.Duration
	// SLO is the TTFT (or latency) objective that could not be met.
	SLO time.Duration
	// Limit is the prediction up to which the request would have been
	// admitted when it is under SLO: a busy device admits up to a share of
	// the objective (see ttftHeadroom), because its queue's wait is a
	// forecast; zero when the limit is the objective itself.
	Limit time.Duration
	// RetryAfter estimates when the backlog ahead will have drained enough
	// for the same request to be accepted.
	RetryAfter time.Duration
	// QueueFull is set when the class queue bound, not the SLO, refused it.
	QueueFull bool
	// Alone is set when the device was idle: the request's own predicted
	// cost is over its objective, with nothing ahead of it. RetryAfter is
	// then when the next probe is due (a request admitted to measure the
	// device again); a shorter prompt or a looser objective fits sooner.
	Alone bool
	// Late is set when the request was queued on a prediction that it
	// would fit, and refused once it no longer could (Predicted is then
	// its wait so far plus its own prefill).
	Late bool
}

func (e *OverloadError) Error() string {
	switch {
	case e.QueueFull:
		return fmt.Sprintf("engine: overloaded: %s queue full, retry after %v", e.Class, e.RetryAfter.Round(time.Millisecond))
	case e.Alone:
		return fmt.Sprintf("engine: predicted TTFT %v for this request alone on an idle device exceeds its %s SLO %v (shorten the prompt or raise the objective), retry after %v",
			e.Predicted.Round(time.Microsecond), e.Class, e.SLO, e.RetryAfter.Round(time.Millisecond))
	case e.Late:
		return fmt.Sprintf("engine: overloaded: the queued %s request can no longer meet its SLO %v (%v with its prefill), retry after %v",
			e.Class, e.SLO, e.Predicted.Round(time.Microsecond), e.RetryAfter.Round(time.Millisecond))
	}
	if e.Limit > 0 && e.Limit < e.SLO {
		return fmt.Sprintf("engine: overloaded: predicted TTFT %v on a busy device exceeds %v, the share of the %s SLO %v a queue's forecast may use, retry after %v",
			e.Predicted.Round(time.Microsecond), e.Limit.Round(time.Microsecond), e.Class, e.SLO, e.RetryAfter.Round(time.Millisecond))
	}
	return fmt.Sprintf("engine: overloaded: predicted TTFT %v exceeds the %s SLO %v, retry after %v",
		e.Predicted.Round(time.Microsecond), e.Class, e.SLO, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap exposes ErrOverloaded, and ErrQueueFull when the queue was full.
func (e *OverloadError) Unwrap() []error {
	if e.QueueFull {
		return []error{ErrOverloaded, ErrQueueFull}
	}
	return []error{ErrOverloaded}
}
