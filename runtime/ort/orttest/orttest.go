// Package orttest is test support for packages whose tests run real ONNX
// Runtime sessions. Like net/http/httptest it is imported by tests only;
// pkg/archtest allows packages named *test to import "testing" and forbids
// production packages from importing them.
package orttest

import (
	"os"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// Need skips the test when the ONNX Runtime library cannot be found, and
// fails it instead under CI (CI=true), where a missing library must never
// pass silently.
func Need(t testing.TB) {
	t.Helper()
	if _, err := ort.FindLibrary(""); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ONNX Runtime is required under CI=true: %v", err)
		}
		t.Skipf("no ONNX Runtime library (run `make setup`): %v", err)
	}
}
