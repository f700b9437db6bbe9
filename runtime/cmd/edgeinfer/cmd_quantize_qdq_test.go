package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/npy"
	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/quant"
)

// TestQuantizeQDQBadCalibration is the bad-input case of issue 8: a
// calibration set of the wrong shape is refused before any model runs,
// naming the file, the input, the expected and the given shape.
func TestQuantizeQDQBadCalibration(t *testing.T) {
	dir := t.TempDir()
	b := onnx.NewBuilder("conv")
	x := b.Input("image", onnx.TensorProto_FLOAT, onnx.Sym("n"), onnx.Fixed(3), onnx.Fixed(16), onnx.Fixed(16))
	w := make([]float32, 2*3*3*3)
	for i := range w {
		w[i] = float32(i%5) - 2
	}
	y := b.Node(onnx.DomainONNX, "Conv", []string{x, b.Float32("w", []int64{2, 3, 3, 3}, w)}, []string{"y"})[0]
	b.Output(y, onnx.TensorProto_FLOAT, onnx.Sym("n"), onnx.Fixed(2), onnx.Fixed(14), onnx.Fixed(14))
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "conv.onnx")
	if err := os.WriteFile(model, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		shape []int64
		want  string
	}{
		{"channels", []int64{1, 1, 16, 16}, "expects [?,3,16,16], given [1,1,16,16]"},
		{"size", []int64{1, 3, 32, 32}, "expects [?,3,16,16], given [1,3,32,32]"},
		{"rank", []int64{3, 16, 16}, "expects rank 4 [?,3,16,16], given rank 3 [3,16,16]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cal := t.TempDir()
			n := int64(1)
			for _, d := range tc.shape {
				n *= d
			}
			if err := os.WriteFile(filepath.Join(cal, "bad.npy"), npy.EncodeFloat32(tc.shape, make([]float32, n)), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := runQuantize(context.Background(), &out, []string{"--in", model, "--out", filepath.Join(cal, "q.onnx"),
				"--scheme", "qdq-int8", "--calibrate", cal})
			if !errors.Is(err, quant.ErrCalibration) || !strings.Contains(err.Error(), `"image"`) ||
				!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.npy") {
				t.Fatalf("err = %v, want ErrCalibration naming bad.npy, \"image\" and %q", err, tc.want)
			}
		})
	}
	var out bytes.Buffer
	if err := runQuantize(context.Background(), &out, []string{"--in", model, "--out", filepath.Join(dir, "q.onnx"), "--scheme", "qdq-int8"}); !errors.Is(err, errUsage) {
		t.Fatalf("no --calibrate: %v", err)
	}
}
