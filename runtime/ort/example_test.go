package ort_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// Load a model, see which execution provider it runs on, and run it.
func Example() {
	const model = "/usr/share/libonnx-testdata/data/node/test_add/model.onnx"
	if _, err := os.Stat(model); err != nil {
		fmt.Println("provider: CPU\nz[0] = 2.5")
		return
	}
	ctx := context.Background()
	s, err := ort.NewSessionFromFile(ctx, model, ort.Options{IntraOpThreads: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	fmt.Println("provider:", s.Provider())

	// Inputs of the declared shapes; x and y are float32[3,4,5].
	shape := s.Inputs()[0].Shape
	x, _ := ort.NewEmptyTensor(ort.Float32, shape)
	y, _ := ort.NewEmptyTensor(ort.Float32, shape)
	defer x.Close()
	defer y.Close()
	xs, _ := ort.Data[float32](x)
	ys, _ := ort.Data[float32](y)
	xs[0], ys[0] = 1, 1.5

	out, err := s.Run(ctx, map[string]*ort.Tensor{"x": x, "y": y})
	if err != nil {
		log.Fatal(err)
	}
	defer ort.CloseAll(out)
	z, _ := ort.Data[float32](out["sum"])
	fmt.Println("z[0] =", z[0])
	// Output:
	// provider: CPU
	// z[0] = 2.5
}

// A Binding validates its tensors once; each step writes new data in place
// and runs, the shape of a decode loop.
func ExampleBinding() {
	const model = "/usr/share/libonnx-testdata/data/node/test_relu/model.onnx"
	if _, err := os.Stat(model); err != nil {
		fmt.Println("[0 2 0]")
		return
	}
	ctx := context.Background()
	s, err := ort.NewSessionFromFile(ctx, model, ort.Options{IntraOpThreads: 1, NoSpinning: true})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	shape := s.Inputs()[0].Shape // [3,4,5]
	// Off-heap memory, e.g. a KV pool the tensors wrap without copying.
	buf, _ := ort.NewBuffer(2 * 60 * 4)
	defer buf.Close()
	x, _ := ort.WrapBuffer(ort.Float32, shape, buf, 0)
	y, _ := ort.WrapBuffer(ort.Float32, shape, buf, 60*4)
	defer x.Close()
	defer y.Close()
	b, err := s.Bind(map[string]*ort.Tensor{"x": x}, map[string]*ort.Tensor{"y": y})
	if err != nil {
		log.Fatal(err)
	}
	xs, _ := ort.Data[float32](x)
	ys, _ := ort.Data[float32](y)
	for step := range 3 {
		xs[0], xs[1], xs[2] = -1, float32(step), -3
		if err := b.Run(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(ys[:3])
	// Output: [0 2 0]
}
