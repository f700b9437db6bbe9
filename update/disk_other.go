//go:build !unix

package update

import "errors"

// StatfsDisk is the Disk of the running system; on this platform it cannot
// tell, and updates are not refused for space.
type StatfsDisk struct{}

// Free implements Disk.
func (StatfsDisk) Free(string) (int64, error) { return 0, errors.ErrUnsupported }
