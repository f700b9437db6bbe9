package tokenizer

import "errors"

// Sentinel errors. Functions wrap them with %w and the operation, so callers
// test with errors.Is.
var (
	// ErrUnsupported reports a tokenizer.json component (model type,
	// pre-tokenizer, normaliser, decoder, post-processor, split pattern) that
	// this package does not implement; the wrapped message names it.
	ErrUnsupported = errors.New("tokenizer: unsupported")

	// ErrMalformed reports a tokenizer.json that is not valid JSON or whose
	// contents contradict themselves (a merge of unknown tokens, a duplicate
	// id, ...).
	ErrMalformed = errors.New("tokenizer: malformed tokenizer.json")

	// ErrUnknownID reports a token id outside the vocabulary.
	ErrUnknownID = errors.New("tokenizer: unknown token id")
)

// ErrChatTemplate reports a chat template that does not compile, or one
// that refused to render a conversation (its raise_exception message is
// wrapped).
var ErrChatTemplate = errors.New("tokenizer: chat template")
