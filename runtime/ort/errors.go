package ort

import "errors"

// Sentinel errors. Every error returned by this package wraps one of these
// (or an error from ONNX Runtime itself) with the operation that failed, so
// callers test with errors.Is.
var (
	// ErrLibraryNotFound means no ONNX Runtime shared library was found in
	// any of the places searched; the message lists them and the fix.
	ErrLibraryNotFound = errors.New("ort: onnx runtime library not found")
	// ErrLibraryArch means the library file exists but was built for another
	// CPU architecture than this process.
	ErrLibraryArch = errors.New("ort: onnx runtime library is for another architecture")
	// ErrLibraryLoad means the library was found but could not be loaded or
	// initialised.
	ErrLibraryLoad = errors.New("ort: cannot load onnx runtime library")
	// ErrClosed is returned by operations on a closed Session, Binding,
	// Tensor or Buffer.
	ErrClosed = errors.New("ort: closed")
	// ErrNotAcquired is returned by Release without a matching Acquire.
	ErrNotAcquired = errors.New("ort: environment not acquired")
	// ErrInvalidModel means ONNX Runtime rejected the model bytes or file.
	ErrInvalidModel = errors.New("ort: invalid model")
	// ErrNoProvider means no execution provider of the chain could run the
	// model; the message carries each provider's reason.
	ErrNoProvider = errors.New("ort: no execution provider could run the model")
	// ErrUnknownInput names an input or output the model does not declare.
	ErrUnknownInput = errors.New("ort: unknown input or output name")
	// ErrMissingInput means a declared input was not supplied.
	ErrMissingInput = errors.New("ort: missing input")
	// ErrTypeMismatch means a tensor's element type differs from the
	// declared one.
	ErrTypeMismatch = errors.New("ort: element type mismatch")
	// ErrShapeMismatch means a tensor's shape differs from the declared one.
	ErrShapeMismatch = errors.New("ort: shape mismatch")
	// ErrInvalidTensor covers bad shapes, sizes and unsupported types when a
	// tensor is created.
	ErrInvalidTensor = errors.New("ort: invalid tensor")
	// ErrRun wraps a failure reported by ONNX Runtime during a run.
	ErrRun = errors.New("ort: run failed")
	// ErrInvalidOptions is returned by Options.Validate.
	ErrInvalidOptions = errors.New("ort: invalid options")
)
