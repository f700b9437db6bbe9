// Package bundletest builds model bundles for tests: pkg/onnx/llama's
// synthetic presets, sealed as real bundles in a test's temporary
// directory, so that each package's tests do not carry their own copy of
// the build. Like net/http/httptest it is imported by tests only.
package bundletest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
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

var shared sync.Map // preset -> func() (*bundle.Bundle, error)

// Shared builds the preset (default graph options) once per test binary and
// returns that bundle to every caller: for tests that only read it, where
// building is the slow part. Callers must not change its files. Its
// directory lives in the system temporary directory until RemoveShared,
// which the package's TestMain calls after m.Run.
func Shared(t testing.TB, preset string) *bundle.Bundle {
	t.Helper()
	f, _ := shared.LoadOrStore(preset, sync.OnceValues(func() (*bundle.Bundle, error) {
		cfg, src, err := llama.Preset(preset)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "bundletest-"+preset+"-")
		if err != nil {
			return nil, err
		}
		return build.BuildDecoder(context.Background(), dir, build.DecoderSpec{
			Name: preset, Version: "1", Config: cfg, Weights: src, CreatedBy: "bundletest (shared)",
		})
	}))
	b, err := f.(func() (*bundle.Bundle, error))()
	if err != nil {
		t.Fatalf("bundletest: build %s: %v", preset, err)
	}
	return b
}

// RemoveShared deletes the directories Shared built (call it from TestMain
// after m.Run; a later Shared builds afresh).
func RemoveShared() error {
	var errs []error
	shared.Range(func(k, f any) bool {
		shared.Delete(k)
		if b, err := f.(func() (*bundle.Bundle, error))(); err == nil {
			errs = append(errs, os.RemoveAll(b.Dir))
		}
		return true
	})
	return errors.Join(errs...)
}
