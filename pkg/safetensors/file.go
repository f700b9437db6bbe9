package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
)

// File is an opened safetensors file. Its methods are safe for concurrent
// use; tensor data returned before Close become invalid at Close (for a
// mapped file, touching them then faults).
type File struct {
	path    string
	tensors []Tensor       // in data order, Data viewing buf
	index   map[string]int // name → position in tensors
	meta    map[string]string

	mu     sync.Mutex
	buf    []byte       // the whole file
	unmap  func() error // releases buf; nil for caller-owned bytes
	closed bool
}

// Open maps the file at path read-only and validates its header.
func Open(path string) (*File, error) {
	buf, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: open: %w", err)
	}
	f, err := parse(buf)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", path, err), unmap())
	}
	f.path, f.unmap = path, unmap
	return f, nil
}

// FromBytes validates b as a safetensors file and returns a File whose
// tensors view b (no copy). The caller keeps b alive and unmodified.
func FromBytes(b []byte) (*File, error) {
	return parse(b)
}

func parse(buf []byte) (*File, error) {
	if len(buf) < 8 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the 8-byte header length", ErrHeader, len(buf))
	}
	n := binary.LittleEndian.Uint64(buf)
	if n > MaxHeaderSize || n > uint64(len(buf)-8) {
		return nil, fmt.Errorf("%w: header length %d in a %d-byte file (limit %d)", ErrHeader, n, len(buf), MaxHeaderSize)
	}
	data := buf[8+n:]
	entries, meta, err := parseHeader(buf[8:8+n], int64(len(data)))
	if err != nil {
		return nil, err
	}
	f := &File{buf: buf, meta: meta, index: make(map[string]int, len(entries))}
	f.tensors = make([]Tensor, len(entries))
	for i, e := range entries {
		f.tensors[i] = Tensor{Name: e.name, DType: e.dtype, Shape: e.shape, Data: data[e.begin:e.end:e.end]}
		f.index[e.name] = i
	}
	return f, nil
}

// Path returns the path given to Open ("" for FromBytes).
func (f *File) Path() string { return f.path }

// Names lists the tensors in data order.
func (f *File) Names() []string {
	names := make([]string, len(f.tensors))
	for i, t := range f.tensors {
		names[i] = t.Name
	}
	return names
}

// Tensor returns the named tensor; its Data view the file (no copy).
func (f *File) Tensor(name string) (Tensor, error) {
	if err := f.checkOpen(); err != nil {
		return Tensor{}, err
	}
	i, ok := f.index[name]
	if !ok {
		return Tensor{}, fmt.Errorf("%w: tensor %q", ErrNotFound, name)
	}
	t := f.tensors[i]
	t.Shape = slices.Clone(t.Shape)
	return t, nil
}

// Float32s returns the named tensor's values as a new []float32 (F32, F16
// and BF16).
func (f *File) Float32s(name string) ([]float32, error) {
	t, err := f.Tensor(name)
	if err != nil {
		return nil, err
	}
	return t.Float32s()
}

// Metadata returns a copy of the header's __metadata__ pairs.
func (f *File) Metadata() map[string]string {
	return maps.Clone(f.meta)
}

func (f *File) checkOpen() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	return nil
}

// Close unmaps the file. It is idempotent.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.buf = nil
	if f.unmap != nil {
		return f.unmap()
	}
	return nil
}

// mapFile opens path and maps it (or reads it, where mapping is not
// available), returning the bytes and their release function.
func mapFile(path string) ([]byte, func() error, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fd.Close() // a mapping outlives its descriptor
	st, err := fd.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size < 8 {
		return nil, nil, fmt.Errorf("%w: %s: %d bytes, shorter than the 8-byte header length", ErrHeader, path, size)
	}
	if size != int64(int(size)) {
		return nil, nil, fmt.Errorf("%s: %d bytes do not fit this platform's address space", path, size)
	}
	return mmap(fd, int(size))
}
