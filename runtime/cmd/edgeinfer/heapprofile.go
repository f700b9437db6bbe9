package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// writeHeapProfile writes the live heap after a collection, so the
// profile holds what stays, not what was about to be freed.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	return f.Close()
}
