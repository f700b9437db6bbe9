package bundletest_test

import (
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
