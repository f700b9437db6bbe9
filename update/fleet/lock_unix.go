//go:build unix

package fleet

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockDir takes an exclusive flock on dir/.lock, waiting for the process
// that holds it, and returns its release. The kernel drops the lock when
// a holder dies, so a killed publisher never leaves the repository locked.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: lock: %v", ErrRepo, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: lock %s: %v", ErrRepo, f.Name(), err)
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}
