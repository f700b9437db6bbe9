//go:build !unix

package safetensors

import (
	"io"
	"os"
)

// mmap reads the whole file where memory mapping is not wired up.
func mmap(fd *os.File, size int) ([]byte, func() error, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(fd, b); err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}
