package ort

import (
	"fmt"
	"unsafe"

	onnx "github.com/yalue/onnxruntime_go"
)

// newScalar makes a rank-0 value. The Go binding rejects empty shapes for
// ordinary tensors but has a Scalar type; its one element lives in a Go
// slice that ONNX Runtime points at, so the returned bytes alias it and the
// tensor's Bytes stay live like any other tensor's. Rank-0 tensors thus
// always own their element (they never wrap caller memory).
func newScalar(dt DType) (onnx.Value, []byte, error) {
	switch dt {
	case Float32:
		return scalarOf[float32]()
	case Float64:
		return scalarOf[float64]()
	case Int8:
		return scalarOf[int8]()
	case Uint8:
		return scalarOf[uint8]()
	case Int16:
		return scalarOf[int16]()
	case Uint16:
		return scalarOf[uint16]()
	case Int32:
		return scalarOf[int32]()
	case Uint32:
		return scalarOf[uint32]()
	case Int64:
		return scalarOf[int64]()
	case Uint64:
		return scalarOf[uint64]()
	case Bool:
		return scalarOf[bool]()
	}
	return nil, nil, fmt.Errorf("%w: rank-0 %s tensors are not supported by the Go binding", ErrInvalidTensor, dt)
}

func scalarOf[T float32 | float64 | int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64 | bool]() (onnx.Value, []byte, error) {
	s, err := onnx.NewEmptyScalar[T]()
	if err != nil {
		return nil, nil, err
	}
	// Scalar's first field is its data slice (onnxruntime_go v1.27.0); the
	// native value points at element 0.
	data := *(*[]T)(unsafe.Pointer(s))
	var z T
	return s, unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), unsafe.Sizeof(z)), nil
}
