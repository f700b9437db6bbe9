//go:build !linux

package plugins_test

// threadCPU has no per-thread clock to read here; the test falls back to
// the wall time.
func threadCPU() (int64, bool) { return 0, false }
