//go:build unix

package safetensors

import (
	"os"

	"golang.org/x/sys/unix"
)

// mmap maps size bytes of fd read-only and shared, so pages come from the
// page cache on demand and several processes share one copy of the weights.
func mmap(fd *os.File, size int) ([]byte, func() error, error) {
	b, err := unix.Mmap(int(fd.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return b, func() error { return unix.Munmap(b) }, nil
}
