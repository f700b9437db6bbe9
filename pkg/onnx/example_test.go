package onnx_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// Build y = relu(x·W) and inspect it.
func Example() {
	b := onnx.NewBuilder("tiny")
	x := b.Input("x", onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Fixed(2))
	w := b.Float32("w", []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	h := b.Op("MatMul", []string{x, w})
	b.Node(onnx.DomainONNX, "Relu", []string{h}, []string{"y"})
	b.Output("y", onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Fixed(3))
	data, err := b.Marshal()
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := onnx.Inspect(data)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("params:", r.Params, "bytes:", r.Bytes)
	fmt.Println("input:", r.Inputs[0].Name, r.Inputs[0].Type, r.Inputs[0].Shape)
	for _, oc := range r.OpHistogram() {
		fmt.Println(oc.Op, oc.Count)
	}
	// Output:
	// params: 6 bytes: 24
	// input: x float32 [batch 2]
	// MatMul 1
	// Relu 1
}
