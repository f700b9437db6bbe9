package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/internal/llm"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
)

// Sentinel errors. Every error the engine returns wraps at least one of
// them (or a context error), so callers decide with errors.Is.
var (
	// ErrUnknownModel reports a model name the engine has not open.
	ErrUnknownModel = errors.New("engine: unknown model")
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("engine: invalid config")
	// ErrNoTokenizer reports text generation on a model without a tokenizer.
	ErrNoTokenizer = errors.New("engine: model has no tokenizer")
	// ErrClosed reports use of a closed engine.
	ErrClosed = errors.New("engine: closed")
	// ErrOverloaded reports a request refused because the device cannot
	// serve it within its SLO now, or its class queue is full; the error is
	// an *OverloadError saying when to retry.
	ErrOverloaded = errors.New("engine: overloaded")
	// ErrInvalidRequest reports a request the engine cannot run as given
	// (bad sampling parameters, unknown class, empty prompt, wrong inputs).
	ErrInvalidRequest = errors.New("engine: invalid request")
	// ErrPromptTooLong reports a prompt that does not fit the model's
	// context (it must leave room for one generated token).
	ErrPromptTooLong = errors.New("engine: prompt longer than the context")
	// ErrCancelled reports a request whose context was cancelled.
	ErrCancelled = errors.New("engine: cancelled")
	// ErrDeadline reports a request whose deadline passed.
	ErrDeadline = errors.New("engine: deadline exceeded")
	// ErrModel reports a failure of the model itself (ONNX Runtime, KV).
	ErrModel = errors.New("engine: model failed")
	// ErrHealthCheck reports a staged model that failed its health check;
	// the active version is unchanged.
	ErrHealthCheck = errors.New("engine: health check failed")
)

// OverloadError is a refusal with advice: retry after RetryAfter.
type OverloadError struct {
	Class Class
	// Predicted is the TTFT the scheduler predicted, SLO the bound it
	// exceeded (zero when the queue was full).
	Predicted, SLO time.Duration
	// RetryAfter is when the same request is predicted to be admitted if
	// nothing else arrives.
	RetryAfter time.Duration
	// QueueFull is set when the class queue was at its limit.
	QueueFull bool
	// Alone is set when the device was idle and the request's own
	// predicted cost is over its objective (RetryAfter is then when the
	// next probe is due: a request admitted to measure the device again).
	Alone bool
	// Late is set when the request was queued on a prediction that it
	// would fit and refused once it no longer could.
	Late bool
}

func (e *OverloadError) Error() string {
	if e.QueueFull {
		return fmt.Sprintf("engine: overloaded: %s queue full, retry after %v", e.Class, e.RetryAfter.Round(time.Millisecond))
	}
	switch {
	case e.Alone:
		return fmt.Sprintf("engine: predicted TTFT %v for this request alone on an idle device exceeds its %s SLO %v (shorten the prompt or raise the objective), retry after %v",
			e.Predicted.Round(time.Microsecond), e.Class, e.SLO, e.RetryAfter.Round(time.Millisecond))
	case e.Late:
		return fmt.Sprintf("engine: overloaded: the queued %s request can no longer meet its SLO %v (%v with its prefill), retry after %v",
			e.Class, e.SLO, e.Predicted.Round(time.Microsecond), e.RetryAfter.Round(time.Millisecond))
	}
	return fmt.Sprintf("engine: overloaded: predicted TTFT %v exceeds the %s SLO %v, retry after %v",
		e.Predicted.Round(time.Microsecond), e.Class, e.SLO, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap makes errors.Is(err, ErrOverloaded) hold.
func (e *OverloadError) Unwrap() error { return ErrOverloaded }

// engineError keeps the machinery's message and chain and adds the
// engine's sentinel, so errors.Is works with the public vocabulary.
type engineError struct {
	err  error
	kind error
}

func (e *engineError) Error() string   { return e.err.Error() }
func (e *engineError) Unwrap() []error { return []error{e.kind, e.err} }

// sentinels maps the internal packages' errors to the engine's.
var sentinels = []struct{ from, to error }{
	{sched.ErrClosed, ErrClosed},
	{sched.ErrInvalidRequest, ErrInvalidRequest},
	{llm.ErrBadSampling, ErrInvalidRequest},
	{llm.ErrPromptTooLong, ErrPromptTooLong},
	{sched.ErrTimeout, ErrDeadline},
	{sched.ErrCancelled, ErrCancelled},
	{sched.ErrExecutor, ErrModel},
	{sched.ErrNoCapacity, ErrModel},
}

// public translates an error of the scheduler or the decoder into one that
// wraps the engine's sentinels.
func public(err error) error {
	if err == nil {
		return nil
	}
	if o, ok := errors.AsType[*sched.OverloadError](err); ok {
		return &OverloadError{Class: classOf(o.Class), Predicted: o.Predicted, SLO: o.SLO, RetryAfter: o.RetryAfter,
			QueueFull: o.QueueFull, Alone: o.Alone, Late: o.Late}
	}
	for _, s := range sentinels {
		if errors.Is(err, s.from) {
			return &engineError{err: err, kind: s.to}
		}
	}
	return err
}
