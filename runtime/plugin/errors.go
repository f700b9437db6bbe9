package plugin

import "errors"

var (
	// ErrConfig reports a Config that fails Validate.
	ErrConfig = errors.New("plugin: invalid config")
	// ErrABI reports a module that does not implement the plugin ABI
	// (missing exports, wrong signatures, another ABI version).
	ErrABI = errors.New("plugin: module does not implement the edgeinfer plugin ABI")
	// ErrTimeout reports a call stopped by its per-call limit or by the
	// request's deadline (then it also matches context.DeadlineExceeded).
	ErrTimeout = errors.New("plugin: call timed out")
	// ErrTrap reports a call that trapped or exited (unreachable, out of
	// bounds access, a Go runtime fatal error, proc_exit).
	ErrTrap = errors.New("plugin: call trapped")
	// ErrMemory reports a plugin that ran out of its memory cap.
	ErrMemory = errors.New("plugin: out of memory")
	// ErrResult reports a response the host refuses: a pointer or length
	// outside the module's memory, a response over the size cap, or bytes
	// that break the wire format.
	ErrResult = errors.New("plugin: malformed result")
	// ErrGuest reports an error the plugin itself returned for the request.
	ErrGuest = errors.New("plugin: plugin returned an error")
	// ErrClosed reports a call on a closed Plugin.
	ErrClosed = errors.New("plugin: closed")
)
