package archtest

import (
	"strings"
	"testing"
)

// sharedLeaves are the one copy of a codec or helper that every layer uses
// (float16, .npy, image resize, a context-aware sleep, a row's argmax). They import
// nothing of the module: an import there would pull its layer into
// everything that converts a half or reads a sample, and tempt the next
// copy.
var sharedLeaves = []string{module + "/pkg/f16", module + "/pkg/npy", module + "/pkg/resize", module + "/pkg/clock", module + "/pkg/vec"}

func TestSharedLeaves(t *testing.T) {
	seen := 0
	for _, p := range listPackages(t) {
		if !contains(sharedLeaves, p.ImportPath) {
			continue
		}
		seen++
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				t.Errorf("%s imports %s; the shared leaves import nothing of the module", p.ImportPath, imp)
			}
		}
	}
	if seen != len(sharedLeaves) {
		t.Errorf("found %d of the shared leaves %v", seen, sharedLeaves)
	}
}
