package main

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/npy"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

const testAdd = "/usr/share/libonnx-testdata/data/node/test_add"

func TestInspectAndRun(t *testing.T) {
	if _, err := os.Stat(testAdd); err != nil {
		t.Skip("libonnx-testdata not installed")
	}
	var out bytes.Buffer
	if err := runInspect(context.Background(), &out, []string{testAdd + "/model.onnx"}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"x", "float32[3,4,5]", "ai.onnx", "parameters:"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("inspect output lacks %q:\n%s", w, out.String())
		}
	}
	out.Reset()
	err := runRun(context.Background(), &out, []string{testAdd + "/model.onnx", "--runs", "5", "--input", "x=" + testAdd + "/test_data_set_0/input_0.pb", "--threads", "1"})
	if err != nil {
		if os.Getenv("CI") != "true" && strings.Contains(err.Error(), "library not found") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	for _, w := range []string{"provider: CPU", "load:", "p50", "p99", "output sum: float32[3 4 5]"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("run output lacks %q:\n%s", w, out.String())
		}
	}
}

func TestRunUsage(t *testing.T) {
	if err := runRun(context.Background(), &bytes.Buffer{}, nil); err == nil {
		t.Fatal("no error without a model")
	}
	err := runRun(context.Background(), &bytes.Buffer{}, []string{"m.onnx", "--provider", "tpu"})
	if err == nil || !strings.Contains(err.Error(), "unknown execution provider") {
		t.Fatalf("bad provider: %v", err)
	}
}

// A .npy input goes through pkg/npy and keeps its dtype and shape.
func TestRunNPYInput(t *testing.T) {
	if _, err := os.Stat(testAdd); err != nil {
		t.Skip("libonnx-testdata not installed (.ci/run installs it)")
	}
	orttest.Need(t)
	x := filepath.Join(t.TempDir(), "x.npy")
	if err := os.WriteFile(x, npy.EncodeFloat32([]int64{3, 4, 5}, make([]float32, 60)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "run", testAdd+"/model.onnx", "--input", "x="+x, "--runs", "1", "--threads", "1")
	if code != 0 || !strings.Contains(out, "input x: float32[3 4 5] from "+x) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.npy")
	os.WriteFile(bad, []byte("not numpy"), 0o644)
	if code, _, errOut := cli(t, "run", testAdd+"/model.onnx", "--input", "x="+bad, "--runs", "1"); code == 0 || !strings.Contains(errOut, "bad.npy: npy:") {
		t.Fatalf("bad .npy: exit %d %q", code, errOut)
	}
}

// An image input is resized by pkg/resize and scaled to --image-range:
// a uniform image's per-channel mean (GlobalAveragePool) is its colour.
func TestRunImageInput(t *testing.T) {
	const pool = "/usr/share/libonnx-testdata/data/node/test_globalaveragepool/model.onnx"
	if _, err := os.Stat(pool); err != nil {
		t.Skip("libonnx-testdata not installed (.ci/run installs it)")
	}
	orttest.Need(t)
	img := image.NewRGBA(image.Rect(0, 0, 17, 11))
	for i := 0; i < len(img.Pix); i += 4 {
		copy(img.Pix[i:], []byte{51, 102, 204, 255})
	}
	p := filepath.Join(t.TempDir(), "c.png")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	png.Encode(f, img)
	f.Close()
	for rng, want := range map[string]string{"0,1": "[0.2 0.4 0.8]", "0,255": "[51 102 204]"} {
		code, out, errOut := cli(t, "run", pool, "--input", "x="+p, "--image-range", rng, "--runs", "1", "--threads", "1")
		if code != 0 || !strings.Contains(out, "output y: float32[1 3 1 1] "+want) {
			t.Errorf("--image-range %s: exit %d, want y %s\n%s%s", rng, code, want, out, errOut)
		}
	}
}
