package onnx

import "errors"

var (
	// ErrBuild reports a mistake while assembling a graph: a duplicate
	// name, an initializer whose data does not match its shape, a failed
	// write of external data. Builder methods record the first one and
	// Model/Marshal return it.
	ErrBuild = errors.New("onnx: invalid graph construction")

	// ErrInvalidModel reports model bytes that cannot be decoded or that
	// decode into something that is not a usable model.
	ErrInvalidModel = errors.New("onnx: invalid model")
)
