package engine

import (
	"errors"
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/internal/llm"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// Sentinel errors. Every error the engine returns wraps at least one of
// them (or a context error), so callers decide with errors.Is.
var (
	// ErrUnknownModel reports a model name the engine has not open (the
	// scheduler's router reports a version removed under a queued request
	// with the same sentinel).
	ErrUnknownModel = sched.ErrUnknownModel
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("engine: invalid config")
	// ErrNoTokenizer reports text generation on a model without a tokenizer.
	ErrNoTokenizer = errors.New("engine: model has no tokenizer")
	// ErrClosed reports use of a closed engine.
	ErrClosed = errors.New("engine: closed")
	// ErrOverloaded reports a request refused because the device cannot
	// serve it within its SLO now, or its class queue is full; the error is
	// an *OverloadError saying when to retry.
	ErrOverloaded = sched.ErrOverloaded
	// ErrInvalidRequest reports a request the engine cannot run as given
	// (bad sampling parameters, unknown class, empty prompt, wrong inputs).
	ErrInvalidRequest = errors.New("engine: invalid request")
	// ErrPromptTooLong reports a prompt that does not fit the model's
	// context (it must leave room for one generated token), or
	// GenerateOptions' bounds (a *PromptError says which).
	ErrPromptTooLong = errors.New("engine: prompt longer than the context")
	// ErrChatTemplate reports a conversation the model's chat template
	// refused (Chat): roles that do not alternate, a system turn where it
	// allows none. The message is the template's.
	ErrChatTemplate = tokenizer.ErrChatTemplate
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

// OverloadError is a refusal with advice: retry after RetryAfter. Class
// names the refused request's class ("realtime", "interactive", "batch");
// Predicted is the TTFT the scheduler predicted and SLO the bound it
// exceeded (zero when the queue was full); RetryAfter is when the same
// request is predicted to be admitted if nothing else arrives. QueueFull is
// set when the class queue was at its limit; Alone when the device was
// idle and the request's own predicted cost is over its objective
// (RetryAfter is then when the next probe is due: a request admitted to
// measure the device again); Late when the request was queued on a
// prediction that it would fit and refused once it no longer could.
// errors.Is(err, ErrOverloaded) holds for it.
//
// It is the scheduler's refusal itself, not a copy: one type from the
// scheduler to the HTTP API's 429.
type OverloadError = sched.OverloadError

// PromptError is a prompt refused for its length before it ran: empty (it
// wraps ErrInvalidRequest), longer than GenerateOptions.MaxPromptTokens
// (Limit), or, with GenerateOptions.FitContext, leaving the context no
// room for MaxTokens tokens (Context); the last two wrap ErrPromptTooLong.
type PromptError struct {
	Model string
	// Tokens is the prompt's length in tokens.
	Tokens int
	// Limit is GenerateOptions.MaxPromptTokens, when the prompt exceeds it.
	Limit int
	// Context is the model's context length, when the prompt and MaxTokens
	// (GenerateOptions.MaxTokens; 0 asks for none, yet one must fit) do
	// not fit it.
	Context, MaxTokens int
}

func (e *PromptError) Error() string {
	switch {
	case e.Tokens == 0:
		return fmt.Sprintf("engine: %s: the prompt encodes to no tokens", e.Model)
	case e.Limit > 0:
		return fmt.Sprintf("engine: %s: the prompt has %d tokens, over the limit of %d", e.Model, e.Tokens, e.Limit)
	}
	return fmt.Sprintf("engine: %s: the prompt has %d tokens and %d more must follow, over the context of %d", e.Model, e.Tokens, max(e.MaxTokens, 1), e.Context)
}

// Unwrap makes errors.Is(err, ErrPromptTooLong) hold, or ErrInvalidRequest
// for an empty prompt.
func (e *PromptError) Unwrap() error {
	if e.Tokens == 0 {
		return ErrInvalidRequest
	}
	return ErrPromptTooLong
}

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
	if o, ok := errors.AsType[*OverloadError](err); ok {
		return o
	}
	for _, s := range sentinels {
		if errors.Is(err, s.from) {
			return &engineError{err: err, kind: s.to}
		}
	}
	return err
}
