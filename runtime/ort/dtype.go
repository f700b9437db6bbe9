package ort

import (
	"fmt"
	"github.com/edgeinfer/edgeinfer/pkg/f16"

	onnx "github.com/yalue/onnxruntime_go"
)

// DType is a tensor element type. Its values are ONNX's TensorProto.DataType
// numbers, which ONNX Runtime uses too.
type DType int

// The element types this package creates tensors of. Others (string,
// complex, float8, int4) can appear in model signatures and are reported by
// inspection, but tensors of them cannot be created here.
const (
	Undefined DType = 0
	Float32   DType = 1
	Uint8     DType = 2
	Int8      DType = 3
	Uint16    DType = 4
	Int16     DType = 5
	Int32     DType = 6
	Int64     DType = 7
	String    DType = 8
	Bool      DType = 9
	Float16   DType = 10
	Float64   DType = 11
	Uint32    DType = 12
	Uint64    DType = 13
	BFloat16  DType = 16
)

var dtypeNames = map[DType]string{
	Undefined: "undefined", Float32: "float32", Uint8: "uint8", Int8: "int8",
	Uint16: "uint16", Int16: "int16", Int32: "int32", Int64: "int64",
	String: "string", Bool: "bool", Float16: "float16", Float64: "float64",
	Uint32: "uint32", Uint64: "uint64", 14: "complex64", 15: "complex128",
	BFloat16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz",
	19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4",
}

func (d DType) String() string {
	if n, ok := dtypeNames[d]; ok {
		return n
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// Size is the size of one element in bytes, or 0 for types without a fixed
// size this package can allocate (string, int4, unknown).
func (d DType) Size() int {
	switch d {
	case Uint8, Int8, Bool, 17, 18, 19, 20:
		return 1
	case Uint16, Int16, Float16, BFloat16:
		return 2
	case Float32, Int32, Uint32:
		return 4
	case Int64, Float64, Uint64, 14:
		return 8
	case 15:
		return 16
	}
	return 0
}

func (d DType) ort() onnx.TensorElementDataType { return onnx.TensorElementDataType(d) }

// Float16Bits is an IEEE 754 half-precision number held as its 16 bits.
// Tensors of it have element type Float16.
type Float16Bits uint16

// BFloat16Bits is a bfloat16 number held as its 16 bits (the upper half of
// a float32). Tensors of it have element type BFloat16.
type BFloat16Bits uint16

// Element is the set of Go types a tensor's data can be viewed as.
type Element interface {
	float32 | float64 | Float16Bits | BFloat16Bits | int8 | uint8 | int16 | uint16 |
		int32 | uint32 | int64 | uint64 | bool
}

// DTypeOf returns the element type that Go type T stands for.
func DTypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case Float16Bits:
		return Float16
	case BFloat16Bits:
		return BFloat16
	case int8:
		return Int8
	case uint8:
		return Uint8
	case int16:
		return Int16
	case uint16:
		return Uint16
	case int32:
		return Int32
	case uint32:
		return Uint32
	case int64:
		return Int64
	case uint64:
		return Uint64
	case bool:
		return Bool
	}
	return Undefined
}

// Float16FromFloat32 rounds f to the nearest half-precision value (ties to
// even), with overflow to infinity and NaN kept NaN (pkg/f16).
func Float16FromFloat32(f float32) Float16Bits { return Float16Bits(f16.FromFloat32(f)) }

// Float32 converts h to float32 exactly.
func (h Float16Bits) Float32() float32 { return f16.ToFloat32(uint16(h)) }

// BFloat16FromFloat32 rounds f to the nearest bfloat16 value (ties to even).
func BFloat16FromFloat32(f float32) BFloat16Bits { return BFloat16Bits(f16.BFloat16FromFloat32(f)) }

// Float32 converts b to float32 exactly.
func (b BFloat16Bits) Float32() float32 { return f16.BFloat16ToFloat32(uint16(b)) }
