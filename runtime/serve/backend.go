package serve

import (
	"context"
	"iter"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// Backend is what the server needs of an engine. EngineBackend adapts
// *engine.Engine to it; the indirection keeps the server's use of the
// engine in one file and lets the HTTP layer be tested on its own.
// Implementations are safe for concurrent use.
type Backend interface {
	// Models lists the open models.
	Models() []Model
	// Generate starts one generation. Ending ctx cancels it and frees its
	// KV blocks within one engine step.
	Generate(ctx context.Context, req GenerateRequest) Stream
	// Infer runs a one-shot model.
	Infer(ctx context.Context, model string, inputs map[string]Tensor, opts InferOptions) (map[string]Tensor, error)
	// Stats is a cheap snapshot for /metrics and readiness.
	Stats() Stats
	// Observe tells o of every request that finishes from now on (from
	// one goroutine; o must not block) until remove is called; an o that
	// is a metrics.MemoryObserver also gets the decoders' memory gauges.
	Observe(o metrics.Observer) (remove func())
}

// Model is what the API shows and needs of an open model.
type Model struct {
	Name string
	// Kind is "decoder" or "oneshot".
	Kind string
	// Context is the decoder's maximum positions (prompt + output).
	Context int
	// Tokenizer is nil for a decoder without one (the text API then
	// refuses it) and for one-shot models.
	Tokenizer *tokenizer.Tokenizer
	// Chat is the bundle's chat template, nil when it has none.
	Chat *tokenizer.ChatTemplate
	// Stop are the strings that end a chat turn besides the model's
	// end-of-sequence ids (the template's turn-end marker).
	Stop []string
	// TextPlugin: the bundle runs a pre plugin on the prompt text, so the
	// model's requests go to the backend as text (GenerateRequest.Text).
	// Plugins: it lists plugins at all, so answers carry their result.
	TextPlugin, Plugins bool
	// Inputs and Outputs name a one-shot model's tensors.
	Inputs, Outputs []string
	// Created is when the model was loaded (the API's "created").
	Created time.Time
	// Version, Quantization, Provider and Runtime describe the build
	// for GET /version (what a benchmark's version matrix records).
	Version, Quantization, Provider, Runtime string
}

// GenerateRequest is one generation as the server asks it of the engine.
type GenerateRequest struct {
	Model  string
	Prompt []int32
	// Text is the prompt as text, for a model whose pre plugin works on
	// it (Model.TextPlugin); TextHasSpecials says it carries its special
	// tokens (a rendered chat template).
	Text            string
	TextHasSpecials bool
	MaxTokens       int
	// Sampling is nil for the bundle's defaults.
	Sampling *Sampling
	Stop     []string
	Class    Class
	SLO      SLO
	// FailFast refuses at once (an *OverloadError) when the TTFT SLO
	// cannot be met, instead of queueing.
	FailFast bool
	ID       string
}

// Sampling are the sampling parameters of a request.
type Sampling struct {
	Temperature, TopP float32
	TopK              int
	Seed              uint64
}

// Class is a request's priority class.
type Class string

// Classes, highest priority first; "" is interactive.
const (
	ClassRealtime    Class = "realtime"
	ClassInteractive Class = "interactive"
	ClassBatch       Class = "batch"
)

// SLO is a request's service-level objectives; zero fields are unbounded.
type SLO struct {
	TTFT, TPOT, Deadline time.Duration
}

// Token is one generated piece of text.
type Token struct {
	ID   int32
	Text string
	Time time.Time
}

// Stream is a generation in progress: Tokens yields the output (an error
// ends it), then Summary says how it ended.
type Stream interface {
	Tokens() iter.Seq2[Token, error]
	Summary() Summary
}

// ResultStream is a Stream of a model with plugins: Result is the post
// plugin's answer over the whole output, by tensor name (a string for a
// text tensor, {"shape", "data"} for a numeric one).
type ResultStream interface {
	Stream
	Result() (map[string]any, error)
}

// Summary is how a generation ended.
type Summary struct {
	Finish       Finish
	PromptTokens int
	OutputTokens int
	Err          error
}

// Finish is why a generation ended, as the engine says it.
type Finish string

// Finish reasons.
const (
	FinishStop          Finish = "stop"
	FinishStopString    Finish = "stop_string"
	FinishLength        Finish = "length"
	FinishContextLength Finish = "context_length"
	FinishCancelled     Finish = "cancelled"
	FinishDeadline      Finish = "deadline"
	FinishRejected      Finish = "rejected"
	FinishError         Finish = "error"
)

// OverloadError is a refusal because the engine is overloaded; the
// server answers 429 with Retry-After.
type OverloadError struct {
	RetryAfter time.Duration
	Reason     string
	// Code is the error code the answer carries: "overloaded" (refused
	// at arrival: the queue ahead, or a full queue), "overloaded_in_queue"
	// (a fail-fast request queued on a prediction that it would fit,
	// refused once it could not), "slo_unreachable" (the request alone on
	// an idle device is predicted over its objective). "" means
	// "overloaded".
	Code string
}

func (e *OverloadError) Error() string { return "serve: overloaded: " + e.Reason }

// Is makes errors.Is(err, ErrOverloaded) hold.
func (e *OverloadError) Is(target error) bool { return target == ErrOverloaded }

// InferOptions carries a one-shot request's class and SLO.
type InferOptions struct {
	Class    Class
	SLO      SLO
	FailFast bool
}

// Tensor is a dense little-endian tensor as the API carries it.
type Tensor struct {
	DType string  // "float32", "int64", "int32", "uint8", "int8", "float64", "bool"
	Shape []int64 // row-major
	Data  []byte
}

// Stats is a snapshot of the engine for /metrics and the tests.
type Stats struct {
	Queued, Running int
	// KV per decoder.
	KV map[string]KVStats
}

// KVStats is one decoder's KV cache occupancy.
type KVStats struct {
	BlocksUsed, BlocksTotal int
	BytesUsed, BytesTotal   int64
}
