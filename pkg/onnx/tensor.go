package onnx

import (
	"encoding/binary"
	"math"
	"unsafe"

	"google.golang.org/protobuf/proto"
)

// hostLittleEndian is true on every platform edgeinfer targets (amd64,
// arm64, arm); ONNX raw_data is little-endian, so there a slice's memory can
// be used as raw_data as is.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// ElemSize returns the size in bytes of one element of dt, or 0 for types
// without a fixed size (string, undefined) or unknown values.
func ElemSize(dt TensorProto_DataType) int {
	switch dt {
	case TensorProto_FLOAT, TensorProto_INT32, TensorProto_UINT32:
		return 4
	case TensorProto_DOUBLE, TensorProto_INT64, TensorProto_UINT64, TensorProto_COMPLEX64:
		return 8
	case TensorProto_FLOAT16, TensorProto_BFLOAT16, TensorProto_INT16, TensorProto_UINT16:
		return 2
	case TensorProto_INT8, TensorProto_UINT8, TensorProto_BOOL:
		return 1
	case TensorProto_COMPLEX128:
		return 16
	}
	return 0
}

// asBytes views a numeric slice as its little-endian bytes: without a copy
// on little-endian hosts, by encoding on others.
func asBytes[T float32 | uint16 | int64 | int32 | uint8 | int8](data []T) []byte {
	if len(data) == 0 {
		return nil
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	if hostLittleEndian || size == 1 {
		return unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), len(data)*size)
	}
	out := make([]byte, len(data)*size)
	for i, v := range data {
		switch x := any(v).(type) {
		case float32:
			binary.LittleEndian.PutUint32(out[i*4:], math.Float32bits(x))
		case uint16:
			binary.LittleEndian.PutUint16(out[i*2:], x)
		case int64:
			binary.LittleEndian.PutUint64(out[i*8:], uint64(x))
		case int32:
			binary.LittleEndian.PutUint32(out[i*4:], uint32(x))
		}
	}
	return out
}

// numElems returns the product of dims, or -1 if a dimension is negative or
// the product overflows.
func numElems(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		if d < 0 || (d > 0 && n > math.MaxInt64/d) {
			return -1
		}
		n *= d
	}
	return n
}

// initializer adds a tensor initializer holding raw (which it references,
// not copies). Large tensors go to the external data writer when one is set.
func (b *Builder) initializer(name string, dt TensorProto_DataType, dims []int64, n int, raw []byte) string {
	if b.err != nil {
		return name
	}
	if name == "" {
		name = b.Fresh("const")
	}
	if want := numElems(dims); want != int64(n) {
		b.fail("initializer %q: %d elements for shape %v", name, n, dims)
		return name
	}
	b.define(name)
	t := &TensorProto{
		Name:     proto.String(name),
		DataType: proto.Int32(int32(dt)),
		Dims:     append([]int64(nil), dims...),
	}
	if b.ext != nil && len(raw) >= b.ext.threshold {
		entries, err := b.ext.write(raw)
		if err != nil {
			b.fail("initializer %q: %v", name, err)
			return name
		}
		t.DataLocation = TensorProto_EXTERNAL.Enum()
		t.ExternalData = entries
	} else {
		t.RawData = raw
	}
	b.graph.Initializer = append(b.graph.Initializer, t)
	return name
}

// Float32 adds a float32 initializer (name "" picks a fresh one) and returns
// its name. The builder keeps data, without copying it, until the model is
// marshalled or the tensor is written to external data: do not modify it.
func (b *Builder) Float32(name string, dims []int64, data []float32) string {
	return b.initializer(name, TensorProto_FLOAT, dims, len(data), asBytes(data))
}

// Float16 adds a float16 initializer from IEEE half-precision bit patterns.
func (b *Builder) Float16(name string, dims []int64, bits []uint16) string {
	return b.initializer(name, TensorProto_FLOAT16, dims, len(bits), asBytes(bits))
}

// Int64 adds an int64 initializer.
func (b *Builder) Int64(name string, dims []int64, data []int64) string {
	return b.initializer(name, TensorProto_INT64, dims, len(data), asBytes(data))
}

// Int32 adds an int32 initializer.
func (b *Builder) Int32(name string, dims []int64, data []int32) string {
	return b.initializer(name, TensorProto_INT32, dims, len(data), asBytes(data))
}

// Uint8 adds a uint8 initializer (packed int4 weights, zero points).
func (b *Builder) Uint8(name string, dims []int64, data []uint8) string {
	return b.initializer(name, TensorProto_UINT8, dims, len(data), data)
}

// Int8 adds an int8 initializer.
func (b *Builder) Int8(name string, dims []int64, data []int8) string {
	return b.initializer(name, TensorProto_INT8, dims, len(data), asBytes(data))
}

// Ints returns a fresh 1-D int64 constant holding vals (shape operands,
// axes, split sizes).
func (b *Builder) Ints(vals ...int64) string {
	return b.Int64("", []int64{int64(len(vals))}, append([]int64(nil), vals...))
}

// Scalar returns a fresh float32 scalar constant.
func (b *Builder) Scalar(v float32) string {
	return b.Float32("", nil, []float32{v})
}

// ScalarInt returns a fresh int64 scalar constant.
func (b *Builder) ScalarInt(v int64) string {
	return b.Int64("", nil, []int64{v})
}
