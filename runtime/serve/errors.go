package serve

import "errors"

// Sentinel errors.
var (
	// ErrConfig reports an invalid Config; the message names the field.
	ErrConfig = errors.New("serve: bad config")
	// ErrOverloaded is what an *OverloadError matches.
	ErrOverloaded = errors.New("serve: overloaded")
	// ErrClosed is returned by Serve after Shutdown.
	ErrClosed = errors.New("serve: server closed")
)

// errBadTensor marks an /v1/infer input the engine cannot take (400).
var errBadTensor = errors.New("serve: bad tensor")
