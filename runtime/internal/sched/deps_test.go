package sched

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoRuntimeImports keeps the scheduler pure Go: it must not depend on
// the ONNX Runtime binding, directly or not, nor on cgo.
func TestNoRuntimeImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasSuffix(dep, "/runtime/ort") || strings.Contains(dep, "onnxruntime_go") || dep == "runtime/cgo" {
			t.Errorf("sched depends on %s", dep)
		}
	}
}
