package power

import (
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
)

// valueFile is one sysfs attribute kept open between reads. Reading an open
// sysfs file again at offset 0 (pread) regenerates its value without the
// path lookup and file setup of open+read+close, a fraction of their cost
// (BenchmarkTick measures a tick of six reads on open files). Files whose
// fs.File has no ReadAt are reopened on every read.
//
// A valueFile is not safe for concurrent use.
type valueFile struct {
	fsys fs.FS
	path string
	f    fs.File
	ra   io.ReaderAt
	buf  [64]byte
}

func newValueFile(fsys fs.FS, path string) *valueFile { return &valueFile{fsys: fsys, path: path} }

// read returns the file's trimmed content. On error the file is closed so
// that the next read reopens it (a driver reload recreates the file).
func (v *valueFile) read() (string, error) {
	if v.f == nil {
		f, err := v.fsys.Open(v.path)
		if err != nil {
			return "", err
		}
		v.f = f
		v.ra, _ = f.(io.ReaderAt)
	}
	var n int
	var err error
	if v.ra != nil {
		n, err = v.ra.ReadAt(v.buf[:], 0)
	} else {
		n, err = io.ReadFull(v.f, v.buf[:])
		v.close()
	}
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		v.close()
		return "", err
	}
	return strings.TrimSpace(string(v.buf[:n])), nil
}

func (v *valueFile) readInt() (int64, error) {
	s, err := v.read()
	if err != nil {
		return 0, err
	}
	x, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q: %w", v.path, s, ErrParse)
	}
	return x, nil
}

// close is safe on a nil valueFile (an optional file that is absent).
func (v *valueFile) close() error {
	if v == nil || v.f == nil {
		return nil
	}
	err := v.f.Close()
	v.f, v.ra = nil, nil
	return err
}

// readString reads a small file once (probe time).
func readString(fsys fs.FS, path string) (string, error) {
	b, err := fs.ReadFile(fsys, path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// readInt reads a small integer file once (probe time).
func readInt(fsys fs.FS, path string) (int64, error) {
	s, err := readString(fsys, path)
	if err != nil {
		return 0, err
	}
	x, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q: %w", path, s, ErrParse)
	}
	return x, nil
}
