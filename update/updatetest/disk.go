package updatetest

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
)

// DiskUse sums the sizes and the allocated blocks (what du counts) of
// every file under dir. The size overstates a bbolt file, which grows by
// truncating itself larger: the pages it never wrote take no blocks.
func DiskUse(t testing.TB, dir string) (size, alloc int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		size += fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			alloc += st.Blocks * 512
		} else {
			alloc += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return size, alloc
}
