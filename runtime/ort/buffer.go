package ort

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Buffer is zeroed memory outside the Go heap (an anonymous private mmap),
// so ONNX Runtime may keep pointers into it for as long as a tensor lives.
// Use it for memory that tensors wrap without copying: KV-cache pools,
// per-step input ids, block tables, pre-allocated outputs.
//
// Bytes and the typed views stay valid until Close; after Close any access
// to them faults. Close is safe for concurrent use; reading and writing the
// memory is the caller's to synchronise.
type Buffer struct {
	mu   sync.Mutex
	data []byte
}

// NewBuffer maps size bytes of zeroed memory.
func NewBuffer(size int) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: buffer size %d", ErrInvalidTensor, size)
	}
	data, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("ort: map %d bytes: %w", size, err)
	}
	return &Buffer{data: data}, nil
}

// Bytes returns the whole buffer; nil after Close.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.data
}

// Len is the buffer's size in bytes (0 after Close).
func (b *Buffer) Len() int { return len(b.Bytes()) }

// Close unmaps the memory. Every tensor wrapping it must be closed first.
// Idempotent.
func (b *Buffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.data == nil {
		return nil
	}
	err := unix.Munmap(b.data)
	b.data = nil
	if err != nil {
		return fmt.Errorf("ort: unmap buffer: %w", err)
	}
	return nil
}

// View returns the buffer's bytes from offset on as a []T of n elements. It
// fails when the range does not fit or offset is not aligned for T.
func View[T Element](b *Buffer, offset, n int) ([]T, error) {
	data := b.Bytes()
	if data == nil {
		return nil, ErrClosed
	}
	return viewBytes[T](data, offset, n)
}

func viewBytes[T Element](data []byte, offset, n int) ([]T, error) {
	var z T
	size := int(unsafe.Sizeof(z))
	if offset < 0 || n < 0 || offset+n*size > len(data) {
		return nil, fmt.Errorf("%w: %d elements of %d bytes at offset %d exceed %d bytes", ErrInvalidTensor, n, size, offset, len(data))
	}
	if offset%size != 0 {
		return nil, fmt.Errorf("%w: offset %d not aligned to %d", ErrInvalidTensor, offset, size)
	}
	if n == 0 {
		return []T{}, nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&data[offset])), n), nil
}

// asBytes reinterprets a slice's memory as bytes (no copy).
func asBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}
