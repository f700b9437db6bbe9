//go:build unix

package update

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// StatfsDisk is the Disk of the running system: statfs(2) of the
// directory holding the path (the store file may not exist yet).
type StatfsDisk struct{}

// Free implements Disk: the blocks available to an unprivileged user, the
// space the store can count on.
func (StatfsDisk) Free(path string) (int64, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &s); err != nil {
		return 0, err
	}
	// The field types differ between platforms, hence the conversions.
	return int64(s.Bavail) * int64(s.Bsize), nil
}
