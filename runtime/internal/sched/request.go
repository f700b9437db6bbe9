package sched

import (
	"fmt"
	"time"
)

// Class is a request's priority class. A higher class is always served
// first; within a class requests are served in arrival order (FIFO).
type Class uint8

// Priority classes, lowest to highest. The zero value means "unset" and is
// treated as ClassInteractive.
const (
	ClassUnset Class = iota
	ClassBatch
	ClassInteractive
	ClassRealtime
)

// numClasses is the number of real classes (ClassBatch..ClassRealtime).
const numClasses = 3

// Classes lists the classes from highest to lowest priority, the order in
// which queues are served.
var Classes = [numClasses]Class{ClassRealtime, ClassInteractive, ClassBatch}

func (c Class) String() string {
	switch c {
	case ClassUnset:
		return "unset"
	case ClassBatch:
		return "batch"
	case ClassInteractive:
		return "interactive"
	case ClassRealtime:
		return "realtime"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// normalize maps the zero value to ClassInteractive.
func (c Class) normalize() Class {
	if c == ClassUnset {
		return ClassInteractive
	}
	return c
}

// index is the slot of a (normalised, valid) class in per-class arrays.
func (c Class) index() int { return int(c) - 1 }

func (c Class) valid() bool { return c >= ClassBatch && c <= ClassRealtime }

// SLO holds a request's latency objectives. A zero field means "none".
type SLO struct {
	// TTFT bounds time to first token (arrived → first token). For one-shot
	// work it bounds arrived → result.
	TTFT time.Duration
	// TPOT bounds the mean time per output token after the first.
	TPOT time.Duration
	// Deadline bounds arrived → finished. When it passes the request ends
	// with outcome timed out; tokens already streamed stay streamed.
	Deadline time.Duration
}

// Request is a generation request for a decoder model. It is plain data; the
// scheduler copies it and never mutates the caller's slices.
type Request struct {
	// Model names the decoder model; the Executor resolves it.
	Model string
	// Class is the priority class; zero means ClassInteractive.
	Class Class
	// Prompt is the tokenised prompt; it must not be empty.
	Prompt []int32
	// MaxTokens caps generated tokens; zero means no cap other than the
	// Executor's stop signal (and the KV cache).
	MaxTokens int
	// SLO holds the latency objectives, recorded in the timeline and used
	// by admission.
	SLO SLO
	// FailFast asks to be refused at once with an *OverloadError when the
	// predicted TTFT exceeds SLO.TTFT, instead of waiting.
	FailFast bool
	// LoadTime is the model load the request waited for before it arrived
	// here (the engine loads a model on demand); recorded in the timeline.
	LoadTime time.Duration
	// Sampling is passed through to the Decoder untouched.
	Sampling Sampling
	// Attach is what the Decoder needs of the request beyond Sampling (a
	// constraint on the output, log-probabilities to record), passed
	// through untouched with every admission, a resumed one included.
	Attach any `json:"-"`
	// OnFinish, if set, is called once when an accepted request leaves the
	// scheduler (any outcome), on the device loop, before its stream ends
	// (Done is closed): it must not block.
	OnFinish func() `json:"-"`
}

// Token is one generated token as streamed to the caller.
type Token struct {
	// ID is the token id.
	ID int32
	// Index is the position among generated tokens, from 0.
	Index int
	// Time is when the step that produced it returned.
	Time time.Time
}

// InferRequest is a one-shot request (vision, audio) served by dynamic
// batching in the same device loop as generation.
type InferRequest[P any] struct {
	// Model names the one-shot model; the Executor resolves it.
	Model string
	// Class is the priority class; zero means ClassInteractive.
	Class Class
	// Input is passed to Oneshot.Infer untouched, batched with others.
	Input P
	// SLO.TTFT bounds arrived → result; SLO.Deadline times the request out.
	SLO SLO
	// FailFast refuses at once when the predicted latency exceeds SLO.TTFT.
	FailFast bool
	// LoadTime is as Request's.
	LoadTime time.Duration
}

// InferResult is the outcome of a completed one-shot request.
type InferResult[P any] struct {
	// Output is the Executor's output for this request's input.
	Output P
	// Timeline is the request's finished timeline.
	Timeline Timeline
}
