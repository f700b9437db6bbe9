package bundletest_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/bundletest"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
)

func TestDecoder(t *testing.T) {
	b := bundletest.Decoder(t, "tiny-test", llama.Options{})
	if b.Manifest.Name != "tiny-test" || b.Manifest.Kind != bundle.KindDecoder {
		t.Fatalf("manifest %+v", b.Manifest)
	}
	// What it built is a sealed bundle: Load re-verifies every digest.
	if _, err := bundle.Load(b.Dir); err != nil {
		t.Fatal(err)
	}
}

func TestSharedIsBuiltOnce(t *testing.T) {
	a := bundletest.Shared(t, "tiny-test")
	b := bundletest.Shared(t, "tiny-test")
	if a != b || a.Dir == "" {
		t.Fatalf("two builds: %q %q", a.Dir, b.Dir)
	}
	if _, err := bundle.Load(a.Dir); err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if err := bundletest.RemoveShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
