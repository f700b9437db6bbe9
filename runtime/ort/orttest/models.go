package orttest

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// Camera model dimensions: x [N, CameraIn] → y [N, CameraOut].
const (
	CameraIn  = 64
	CameraOut = 16
)

// CameraModel writes a small one-shot model with a symbolic batch
// dimension — y = relu(relu(x·W1)·W2), x [N, 64] → y [N, 16], fixed random
// weights — standing in for a camera model, and returns its path.
func CameraModel(t testing.TB) string {
	t.Helper()
	r := rand.New(rand.NewPCG(11, 13))
	weights := func(n int) []float32 {
		w := make([]float32, n)
		for i := range w {
			w[i] = float32(r.NormFloat64() / 8)
		}
		return w
	}
	b := onnx.NewBuilder("camera")
	x := b.Input("x", onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Fixed(CameraIn))
	w1 := b.Float32("w1", []int64{CameraIn, 256}, weights(CameraIn*256))
	w2 := b.Float32("w2", []int64{256, CameraOut}, weights(256*CameraOut))
	h := b.Op("Relu", []string{b.Op("MatMul", []string{x, w1})})
	b.Node(onnx.DomainONNX, "Relu", []string{b.Op("MatMul", []string{h, w2})}, []string{"y"})
	b.Output("y", onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Fixed(CameraOut))
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "camera.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
