package ort

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	onnx "github.com/yalue/onnxruntime_go"
)

// Tensor is an ONNX Runtime tensor whose memory is safe for C to keep: it
// lives outside the Go heap (a Buffer) or is a Go slice pinned until Close.
// The data may be read and written between runs through Bytes or Data; the
// shape and element type are fixed.
//
// A Tensor holds a reference to the process environment. Close is safe for
// concurrent use and idempotent; accessing the data concurrently with a Run
// that uses the tensor is a data race, as it would be for any shared memory.
type Tensor struct {
	mu    sync.Mutex
	value onnx.Value
	dtype DType
	shape []int64
	data  []byte
	owned *Buffer        // off-heap memory freed with the tensor, or nil
	pin   runtime.Pinner // pins caller-provided Go memory
}

// NewTensor wraps data (zero copy) as a tensor of the given shape. The
// slice's memory is pinned so ONNX Runtime may keep pointing at it; it must
// not be resliced away or reused for something else until Close. data must
// hold exactly the shape's element count.
func NewTensor[T Element](shape []int64, data []T) (*Tensor, error) {
	if err := checkElements(shape, data); err != nil {
		return nil, err
	}
	return WrapBytes(DTypeOf[T](), shape, asBytes(data))
}

// WrapBytes wraps data, raw little-endian elements of type dt, as a tensor
// of the given shape (zero copy), as NewTensor does a typed slice: the way
// to hand ONNX Runtime memory whose element type is known only at run time
// (a KV cache's pools, kvcache.Cache.KeyPoolBytes). Go memory is pinned
// until Close; data must stay valid that long and hold exactly the shape's
// bytes, aligned for dt.
func WrapBytes(dt DType, shape []int64, data []byte) (*Tensor, error) {
	if err := checkBytes(dt, shape, data); err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return NewEmptyTensor(dt, shape)
	}
	if size := dt.Size(); uintptr(unsafe.Pointer(&data[0]))%uintptr(size) != 0 {
		return nil, fmt.Errorf("%w: %s%v: data is not aligned to %d bytes", ErrInvalidTensor, dt, shape, size)
	}
	t := &Tensor{dtype: dt, shape: slices.Clone(shape), data: data[:len(data):len(data)]}
	t.pin.Pin(&data[0])
	if err := t.init(); err != nil {
		t.pin.Unpin()
		return nil, err
	}
	return t, nil
}

// CopyTensor copies data into fresh off-heap memory and wraps it; the caller
// may reuse data at once.
func CopyTensor[T Element](shape []int64, data []T) (*Tensor, error) {
	if err := checkElements(shape, data); err != nil {
		return nil, err
	}
	t, err := NewEmptyTensor(DTypeOf[T](), shape)
	if err != nil {
		return nil, err
	}
	copy(t.data, asBytes(data))
	return t, nil
}

// NewEmptyTensor allocates a zeroed off-heap tensor, e.g. a pre-allocated
// output (the way to receive float16 outputs, see Session.RunInto).
func NewEmptyTensor(dt DType, shape []int64) (*Tensor, error) {
	n, err := elementCount(shape)
	if err != nil {
		return nil, err
	}
	size := dt.Size()
	if size == 0 {
		return nil, fmt.Errorf("%w: cannot allocate %s tensors", ErrInvalidTensor, dt)
	}
	nbytes := int(n) * size
	buf, err := NewBuffer(max(nbytes, 1))
	if err != nil {
		return nil, err
	}
	t := &Tensor{dtype: dt, shape: slices.Clone(shape), data: buf.Bytes()[:nbytes], owned: buf}
	if err := t.init(); err != nil {
		return nil, errors.Join(err, buf.Close())
	}
	return t, nil
}

// WrapBuffer wraps part of b, from byte offset on, as a tensor (zero copy):
// the way to hand a memory pool (a paged KV cache) to ONNX Runtime once and
// keep writing into it from Go. b must outlive the tensor.
func WrapBuffer(dt DType, shape []int64, b *Buffer, offset int) (*Tensor, error) {
	n, err := elementCount(shape)
	if err != nil {
		return nil, err
	}
	data := b.Bytes()
	if data == nil {
		return nil, fmt.Errorf("ort: wrap buffer: %w", ErrClosed)
	}
	end := offset + int(n)*dt.Size()
	if offset < 0 || end > len(data) {
		return nil, fmt.Errorf("%w: %s%v at offset %d does not fit a %d-byte buffer", ErrInvalidTensor, dt, shape, offset, len(data))
	}
	return WrapBytes(dt, shape, data[offset:end:end])
}

// init creates the native value over t.data. It takes a reference on the
// environment, because the value must be released before the library is
// unloaded.
func (t *Tensor) init() error {
	if err := Acquire(""); err != nil {
		return err
	}
	if len(t.shape) == 0 {
		v, data, err := newScalar(t.dtype)
		if err != nil {
			_ = Release()
			return err
		}
		copy(data, t.data)
		t.value, t.data = v, data
		return nil
	}
	raw := t.data
	if len(raw) == 0 && t.owned != nil {
		raw = t.owned.Bytes() // an empty tensor still needs a non-nil pointer
	}
	v, err := onnx.NewCustomDataTensor(onnx.Shape(t.shape), raw, t.dtype.ort())
	if err != nil {
		_ = Release()
		return fmt.Errorf("%w: %s%v: %v", ErrInvalidTensor, t.dtype, t.shape, err)
	}
	t.value = v
	return nil
}

// wrapOutput adopts a value ONNX Runtime allocated for an output. The Go
// binding has already copied the data into a Go slice it owns.
func wrapOutput(v onnx.Value) (*Tensor, error) {
	var data []byte
	switch x := v.(type) {
	case *onnx.Tensor[float32]:
		data = asBytes(x.GetData())
	case *onnx.Tensor[float64]:
		data = asBytes(x.GetData())
	case *onnx.Tensor[int8]:
		data = asBytes(x.GetData())
	case *onnx.Tensor[uint8]:
		data = asBytes(x.GetData())
	case *onnx.Tensor[int16]:
		data = asBytes(x.GetData())
	case *onnx.Tensor[uint16]:
		data = asBytes(x.GetData())
	case *onnx.Tensor[int32]:
		data = asBytes(x.GetData())
	case *onnx.Tensor[uint32]:
		data = asBytes(x.GetData())
	case *onnx.Tensor[int64]:
		data = asBytes(x.GetData())
	case *onnx.Tensor[uint64]:
		data = asBytes(x.GetData())
	case *onnx.Tensor[bool]:
		data = asBytes(x.GetData())
	case *onnx.CustomDataTensor:
		data = x.GetData()
	default:
		_ = v.Destroy()
		return nil, fmt.Errorf("%w: output of ONNX type %v is not a tensor", ErrInvalidTensor, v.GetONNXType())
	}
	if err := Acquire(""); err != nil {
		_ = v.Destroy()
		return nil, err
	}
	return &Tensor{value: v, dtype: DType(v.DataType()), shape: v.GetShape(), data: data}, nil
}

// DType is the tensor's element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns a copy of the tensor's shape.
func (t *Tensor) Shape() []int64 { return slices.Clone(t.shape) }

// Len is the number of elements.
func (t *Tensor) Len() int {
	n, _ := elementCount(t.shape)
	return int(n)
}

// Bytes is the tensor's memory; nil after Close.
func (t *Tensor) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.data
}

// Data returns the tensor's memory as a []T (zero copy). T must match the
// element type: Float16Bits for float16, bool for bool, and so on.
func Data[T Element](t *Tensor) ([]T, error) {
	if want := DTypeOf[T](); want != t.dtype {
		return nil, fmt.Errorf("%w: tensor holds %s, viewed as %s", ErrTypeMismatch, t.dtype, want)
	}
	data := t.Bytes()
	if data == nil {
		return nil, ErrClosed
	}
	return viewBytes[T](data, 0, t.Len())
}

// Close releases the native value, unpins or frees the memory, and drops the
// environment reference. It must not be called while a Run uses the tensor.
// Idempotent.
func (t *Tensor) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.value == nil {
		return nil
	}
	err := t.value.Destroy()
	t.value = nil
	t.data = nil
	t.pin.Unpin()
	if t.owned != nil {
		err = errors.Join(err, t.owned.Close())
		t.owned = nil
	}
	return errors.Join(err, Release())
}

// native returns the native value, or nil once closed.
func (t *Tensor) native() onnx.Value {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.value
}

// CloseAll closes every tensor of m (the outputs of Session.Run) and returns
// the joined errors.
func CloseAll(m map[string]*Tensor) error {
	var errs []error
	for _, t := range m {
		if t != nil {
			errs = append(errs, t.Close())
		}
	}
	return errors.Join(errs...)
}

// checkElements says whether data holds exactly shape's elements (NewTensor,
// CopyTensor).
func checkElements[T Element](shape []int64, data []T) error {
	n, err := elementCount(shape)
	if err != nil {
		return err
	}
	if int64(len(data)) != n {
		return fmt.Errorf("%w: shape %v needs %d %s elements, got %d", ErrInvalidTensor, shape, n, DTypeOf[T](), len(data))
	}
	return nil
}

// checkBytes says whether data holds exactly shape's elements of type dt,
// a type of fixed size (WrapBytes, CopyBytes).
func checkBytes(dt DType, shape []int64, data []byte) error {
	n, err := elementCount(shape)
	if err != nil {
		return err
	}
	size := int64(dt.Size())
	if size == 0 {
		return fmt.Errorf("%w: %s tensors have no fixed element size to wrap or copy", ErrInvalidTensor, dt)
	}
	if int64(len(data)) != n*size {
		return fmt.Errorf("%w: %s%v needs %d bytes, got %d", ErrInvalidTensor, dt, shape, n*size, len(data))
	}
	return nil
}

// elementCount validates shape and returns its number of elements.
func elementCount(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("%w: negative dimension in shape %v", ErrInvalidTensor, shape)
		}
		if d != 0 && n > (1<<50)/d {
			return 0, fmt.Errorf("%w: shape %v too large", ErrInvalidTensor, shape)
		}
		n *= d
	}
	return n, nil
}

// CopyBytes copies raw little-endian element data of type dt into fresh
// off-heap memory and wraps it (for data read from files: .npy, TensorProto).
func CopyBytes(dt DType, shape []int64, data []byte) (*Tensor, error) {
	if err := checkBytes(dt, shape, data); err != nil {
		return nil, err
	}
	t, err := NewEmptyTensor(dt, shape)
	if err != nil {
		return nil, err
	}
	copy(t.data, data)
	return t, nil
}
