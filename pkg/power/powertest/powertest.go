// Package powertest is test support for code that reads sensors through
// an fs.FS (pkg/power's sampler, and what drives it): a mutable in-memory
// sysfs. Like net/http/httptest it is imported by tests only.
package powertest

import (
	"io"
	"io/fs"
	"sync"
	"testing/fstest"
	"time"
)

// FS is a mutable in-memory sysfs for sampler tests: values change
// between ticks, and a file can vanish (reads then fail with ENOENT, as
// sysfs attributes of a removed device do) and come back. Paths are
// fs.FS paths ("sys/class/thermal/thermal_zone0/temp"). It is safe for
// concurrent use.
type FS struct {
	mu    sync.Mutex
	files map[string]string
}

// NewFS returns an FS holding files (path -> contents); it keeps the map.
func NewFS(files map[string]string) *FS { return &FS{files: files} }

// Set writes (or creates) a file.
func (m *FS) Set(name, v string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[name] = v
}

// Remove deletes a file: open handles then fail to read, as sysfs does.
func (m *FS) Remove(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.files, name)
}

func (m *FS) snapshot() fstest.MapFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := fstest.MapFS{}
	for k, v := range m.files {
		out[k] = &fstest.MapFile{Data: []byte(v)}
	}
	return out
}

// Open serves directories from a snapshot and files as live handles.
func (m *FS) Open(name string) (fs.File, error) {
	m.mu.Lock()
	_, ok := m.files[name]
	m.mu.Unlock()
	if !ok {
		return m.snapshot().Open(name)
	}
	return &memFile{fs: m, name: name}, nil
}

type memFile struct {
	fs   *FS
	name string
	off  int64
}

func (f *memFile) ReadAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	v, ok := f.fs.files[f.name]
	f.fs.mu.Unlock()
	if !ok {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrNotExist}
	}
	if off >= int64(len(v)) {
		return 0, io.EOF
	}
	n := copy(b, v[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Read(b []byte) (int, error) {
	n, err := f.ReadAt(b, f.off)
	f.off += int64(n)
	return n, err
}

func (f *memFile) Stat() (fs.FileInfo, error) { return memInfo(f.name), nil }
func (f *memFile) Close() error               { return nil }

type memInfo string

func (i memInfo) Name() string       { return string(i) }
func (i memInfo) Size() int64        { return 0 }
func (i memInfo) Mode() fs.FileMode  { return 0o444 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }
