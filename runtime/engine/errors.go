package engine

import "errors"

var (
	// ErrUnknownModel reports a model name the engine did not open.
	ErrUnknownModel = errors.New("engine: unknown model")
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("engine: invalid config")
	// ErrNoTokenizer reports text generation on a model without a tokenizer.
	ErrNoTokenizer = errors.New("engine: model has no tokenizer")
	// ErrClosed reports use of a closed engine.
	ErrClosed = errors.New("engine: closed")
)
