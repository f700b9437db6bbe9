package llm

import "errors"

var (
	// ErrBadSampling reports sampling parameters out of range.
	ErrBadSampling = errors.New("llm: invalid sampling parameters")
	// ErrPromptTooLong reports a prompt that does not fit the model's context.
	ErrPromptTooLong = errors.New("llm: prompt longer than the context")
	// ErrContract reports a model whose inputs/outputs match no decoder contract.
	ErrContract = errors.New("llm: model does not follow a decoder contract")
	// ErrClosed reports use of a closed executor.
	ErrClosed = errors.New("llm: executor closed")
	// ErrBatch reports a step batch the executor cannot run.
	ErrBatch = errors.New("llm: invalid step batch")
)
