package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// TestMatMulKernelPerplexity: the trained tiny model (examples/tinylm)
// imported as int4-b32 and as int8 with --portable-matmul
// (com.microsoft.MatMulNBits) and by default (ai.edgeinfer.MatMulNBits)
// scores the same held-out perplexity within 0.1 %, and the default bundle
// really uses the kernel.
func TestMatMulKernelPerplexity(t *testing.T) {
	if testing.Short() {
		t.Skip("scores the held-out text four times")
	}
	orttest.Need(t)
	for _, scheme := range []string{"int4-b32", "int8"} {
		t.Run(scheme, func(t *testing.T) { matmulKernelPerplexity(t, scheme) })
	}
}

func matmulKernelPerplexity(t *testing.T, scheme string) {
	hf := filepath.Join("..", "..", "..", "examples", "tinylm")
	nll := map[bool]float64{}
	for _, kernel := range []bool{false, true} {
		flags := []string{"--scheme", scheme}
		if !kernel {
			flags = append(flags, "--portable-matmul")
		}
		dir := importTiny(t, flags...)
		var stdout, stderr bytes.Buffer
		model, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(model, []byte("edgeinfer.matmul")); got != kernel {
			t.Fatalf("kernel %v: model records edgeinfer.matmul: %v", kernel, got)
		}
		args := []string{"perplexity", "--model", dir, "--text", filepath.Join(hf, "testdata", "heldout.txt"), "--window", "256"}
		if code := runMain(context.Background(), &stdout, &stderr, args); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		m := regexp.MustCompile(`mean nll ([0-9.]+) nats`).FindStringSubmatch(stdout.String())
		if m == nil {
			t.Fatalf("perplexity printed no mean nll: %s", stdout.String())
		}
		nll[kernel], _ = strconv.ParseFloat(m[1], 64)
	}
	ratio := math.Exp(nll[true] - nll[false])
	t.Logf("held-out perplexity: portable %.4f, kernel %.4f (ratio %.5f)", math.Exp(nll[false]), math.Exp(nll[true]), ratio)
	if math.Abs(ratio-1) > 0.001 {
		t.Errorf("perplexity on the kernel is %.4f× the portable graph's, want within 0.1%%", ratio)
	}
}

// TestMatMulKernelNeedsInt4B32: --matmul-kernel with weights the kernel
// does not run is a usage error naming the schemes it needs.
func TestMatMulKernelNeedsInt4B32(t *testing.T) {
	for _, scheme := range []string{"fp32", "int8-pc", "int8-asym", "int4-b64", "int4-b32-asym", "int4-b32-acc1"} {
		var stdout, stderr bytes.Buffer
		code := runMain(context.Background(), &stdout, &stderr, []string{"model", "build", "--preset", "tiny-test",
			"--out", filepath.Join(t.TempDir(), "b"), "--scheme", scheme, "--matmul-kernel"})
		if code != 2 || !bytes.Contains(stderr.Bytes(), []byte("--matmul-kernel needs --scheme int4-b32 or int8")) {
			t.Errorf("--scheme %s --matmul-kernel: exit %d, stderr %q; want 2 naming int4-b32", scheme, code, stderr.String())
		}
	}
}

// TestCallerScattersImport: `model import --caller-scatters` builds the
// graph form older SDK releases load (new_keys/new_values out, no slots
// in), the default one whose attention writes the pools (slots in); both
// generate the same text from the trained tiny model, float16 pools.
func TestCallerScattersImport(t *testing.T) {
	orttest.Need(t)
	var texts []string
	for _, caller := range []bool{false, true} {
		flags := []string{"--kv-float16"}
		if caller {
			flags = append(flags, "--caller-scatters")
		}
		dir := importTiny(t, flags...)
		model, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		info, err := ort.ReadModelInfo(model)
		if err != nil {
			t.Fatal(err)
		}
		slots := slices.ContainsFunc(info.Inputs, func(v ort.ValueInfo) bool { return v.Name == "slots" })
		newKeys := slices.ContainsFunc(info.Outputs, func(v ort.ValueInfo) bool { return v.Name == "new_keys.0" })
		if slots == caller || newKeys != caller {
			t.Fatalf("--caller-scatters %v: input slots %v, output new_keys.0 %v", caller, slots, newKeys)
		}
		var stdout, stderr bytes.Buffer
		args := []string{"generate", "--model", dir, "--prompt", "The label on the shelf says", "--max-tokens", "20"}
		if code := runMain(context.Background(), &stdout, &stderr, args); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		text, _, _ := strings.Cut(stdout.String(), "\n")
		texts = append(texts, text)
	}
	if texts[0] != texts[1] || !strings.HasPrefix(texts[0], "The label on the shelf says") {
		t.Fatalf("generated %q writing the pools, %q scattering", texts[0], texts[1])
	}
}

// importTiny imports the trained tiny model (examples/tinylm) with flags
// into a new bundle directory and returns it.
func importTiny(t *testing.T, flags ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	args := append([]string{"model", "import", "--hf", filepath.Join("..", "..", "..", "examples", "tinylm"), "--out", dir}, flags...)
	var stdout, stderr bytes.Buffer
	if code := runMain(context.Background(), &stdout, &stderr, args); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
	}
	return dir
}
