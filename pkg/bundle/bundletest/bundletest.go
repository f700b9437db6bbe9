// Package bundletest builds model bundles for tests: pkg/onnx/llama's
// synthetic presets, sealed as real bundles in a test's temporary
// directory, so that each package's tests do not carry their own copy of
// the build. Like net/http/httptest it is imported by tests only.
package bundletest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
)

// Decoder builds the synthetic preset (e.g. "tiny-test") with the given
// graph options as decoder bundle preset@1 in a new directory under
// t.TempDir(), and returns it loaded. It fails the test on any error.
func Decoder(t testing.TB, preset string, opts llama.Options) *bundle.Bundle {
	t.Helper()
	return DecoderIn(t, filepath.Join(t.TempDir(), preset), preset, opts)
}

// DecoderIn is Decoder writing into dir (which must not hold a bundle).
func DecoderIn(t testing.TB, dir, preset string, opts llama.Options) *bundle.Bundle {
	t.Helper()
	cfg, src, err := llama.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	b, err := build.BuildDecoder(context.Background(), dir, build.DecoderSpec{
		Name: preset, Version: "1", Config: cfg, Weights: src, Options: opts,
		CreatedBy: "bundletest " + t.Name(),
	})
	if err != nil {
		t.Fatalf("bundletest: build %s: %v", preset, err)
	}
	return b
}
