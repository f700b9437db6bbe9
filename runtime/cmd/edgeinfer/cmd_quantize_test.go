package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/bundletest"
	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

func runQuantizeCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), &stdout, &stderr, append([]string{"quantize"}, args...))
	return code, stdout.String(), stderr.String()
}

// TestQuantizeCommandReport quantises the tiny-test bundle to int8 and int4
// and checks the report lines, the recorded scheme and the sidecar.
func TestQuantizeCommandReport(t *testing.T) {
	orttest.Need(t)
	ref := bundletest.Decoder(t, "tiny-test", llama.Options{}).Dir
	for _, tc := range []struct {
		scheme    string
		maxPPLPct float64
	}{{"int8", 1}, {"int4-b32", 5}} {
		t.Run(tc.scheme, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), tc.scheme)
			code, stdout, stderr := runQuantizeCLI(t, "--in", ref, "--out", out, "--scheme", tc.scheme, "--keep", "lm_head", "--report", "--tokens", "64", "--threads", "1")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, want := range []string{"perplexity: reference ", "top1_agreement: ", "kl: ", "scheme: " + tc.scheme} {
				if !strings.Contains(stdout, want) {
					t.Errorf("output lacks %q:\n%s", want, stdout)
				}
			}
			side, err := quant.ReadSidecar(out)
			if err != nil {
				t.Fatal(err)
			}
			if side.Quality == nil || side.Quality.Tokens != 63 || side.Quality.PerplexityDeltaPct > tc.maxPPLPct {
				t.Fatalf("quality %+v", side.Quality)
			}
			b, err := bundle.Load(out) // the resealed manifest verifies
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(b.Manifest.Quantization, tc.scheme) {
				t.Errorf("manifest quantization %q", b.Manifest.Quantization)
			}
		})
	}
}

// TestQuantizeCommandBadInput: usage errors exit 2; a graph with nothing to
// quantise is a clear no-op with exit 0 and nothing written.
func TestQuantizeCommandBadInput(t *testing.T) {
	dir := t.TempDir()
	b := onnx.NewBuilder("add")
	x := b.Input("x", onnx.TensorProto_FLOAT, onnx.Fixed(4))
	b.Output(b.Node("", "Add", []string{x, x}, []string{"y"})[0], onnx.TensorProto_FLOAT, onnx.Fixed(4))
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	add := filepath.Join(dir, "add.onnx")
	if err := os.WriteFile(add, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.onnx")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		output string
	}{
		{"no weights", []string{"--in", add, "--out", out, "--scheme", "int4-b32"}, 0, "nothing to quantise"},
		{"bad scheme", []string{"--in", add, "--out", out, "--scheme", "int3"}, 2, "invalid scheme"},
		{"missing flags", []string{"--in", add}, 2, "required"},
		{"report on a file", []string{"--in", add, "--out", out, "--scheme", "int8", "--report"}, 2, "bundles"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runQuantizeCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.output) {
				t.Fatalf("exit %d, output %q %q; want %d and %q", code, stdout, stderr, tc.code, tc.output)
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatalf("%s written", out)
			}
		})
	}
}
