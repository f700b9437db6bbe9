package ort

import (
	"fmt"
	"os"
	"runtime"
	"testing"
)

// libErr is why the ONNX Runtime library could not be acquired; tests that
// need it call needLib, which skips, or fails under CI=true (CI must never
// pass by skipping everything).
var libErr error

func TestMain(m *testing.M) {
	libErr = Acquire("")
	code := m.Run()
	if libErr == nil {
		if err := Release(); err != nil {
			fmt.Fprintln(os.Stderr, "release:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func needLib(t testing.TB) {
	t.Helper()
	if libErr == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("ONNX Runtime library required under CI=true: %v", libErr)
	}
	t.Skipf("ONNX Runtime library not available (run `make setup`): %v", libErr)
}

func runtimeGOARCH() string { return runtime.GOARCH }
