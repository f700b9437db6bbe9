package safetensors

import (
	"encoding/binary"
	"fmt"
	"github.com/edgeinfer/edgeinfer/pkg/f16"
	"math"
	"unsafe"
)

// Tensor is one named tensor. For tensors read from a File, Data is a view
// of the file's mapping: it must not be modified and is invalid after the
// File is closed. For Write, Data holds the little-endian element bytes.
// A Tensor is a plain value, safe to share read-only.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// NumElements returns the product of the shape (1 for a scalar).
func (t Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// hostLittleEndian reports whether the raw bytes can be viewed as native
// numbers; safetensors data are always little-endian.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Float32View returns the F32 data as a []float32 sharing the tensor's
// memory (no copy). It fails with ErrDType for other dtypes and with
// ErrAlignment when the data are not 4-byte aligned (or the host is
// big-endian), in which case Float32s still works.
func (t Tensor) Float32View() ([]float32, error) {
	if t.DType != F32 {
		return nil, fmt.Errorf("%w: tensor %q is %s, a float32 view needs F32", ErrDType, t.Name, t.DType)
	}
	if len(t.Data) == 0 {
		return []float32{}, nil
	}
	if !hostLittleEndian || uintptr(unsafe.Pointer(&t.Data[0]))%4 != 0 {
		return nil, fmt.Errorf("%w: tensor %q", ErrAlignment, t.Name)
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4), nil
}

// Float32s returns a new []float32 holding the tensor's values converted
// from F32, F16 or BF16. Other dtypes fail with ErrDType.
func (t Tensor) Float32s() ([]float32, error) {
	b := t.Data
	switch t.DType {
	case F32:
		out := make([]float32, len(b)/4)
		if v, err := t.Float32View(); err == nil {
			copy(out, v)
			return out, nil
		}
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	case F16:
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = f16.ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out, nil
	case BF16:
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = f16.BFloat16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: tensor %q is %s, float32 conversion needs F32, F16 or BF16", ErrDType, t.Name, t.DType)
}

// FromFloat32s builds an F32 tensor for Write, copying v into little-endian
// bytes. It does not check len(v) against shape; Write does.
func FromFloat32s(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{Name: name, DType: F32, Shape: shape, Data: b}
}

// FromFloat32sAs builds an F32, F16 or BF16 tensor for Write, rounding
// each value to nearest-even when narrowing.
func FromFloat32sAs(name string, dtype DType, shape []int, v []float32) (Tensor, error) {
	switch dtype {
	case F32:
		return FromFloat32s(name, shape, v), nil
	case F16, BF16:
		conv := f16.FromFloat32
		if dtype == BF16 {
			conv = f16.BFloat16FromFloat32
		}
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], conv(x))
		}
		return Tensor{Name: name, DType: dtype, Shape: shape, Data: b}, nil
	}
	return Tensor{}, fmt.Errorf("%w: tensor %q: cannot encode float32 as %s", ErrDType, name, dtype)
}
