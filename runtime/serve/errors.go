package serve

import "errors"

// Sentinel errors.
var (
	// ErrConfig reports an invalid Config; the message names the field.
	ErrConfig = errors.New("serve: bad config")
	// ErrClosed is returned by Serve after Shutdown.
	ErrClosed = errors.New("serve: server closed")
)
