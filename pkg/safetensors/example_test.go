package safetensors_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/pkg/safetensors"
)

func Example() {
	dir, _ := os.MkdirTemp("", "st")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")

	// Write a checkpoint with one F32 and one F16 tensor.
	half, _ := safetensors.FromFloat32sAs("model.norm.weight", safetensors.F16, []int{3}, []float32{1, 0.5, -2})
	var b bytes.Buffer
	err := safetensors.Write(&b, []safetensors.Tensor{
		safetensors.FromFloat32s("lm_head.weight", []int{2, 3}, []float32{1, 2, 3, 4, 5, 6}),
		half,
	}, map[string]string{"format": "pt"})
	if err != nil {
		panic(err)
	}
	os.WriteFile(path, b.Bytes(), 0o644)

	// Map it and read tensors back.
	f, err := safetensors.Open(path)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	for _, name := range f.Names() {
		t, _ := f.Tensor(name)
		v, _ := f.Float32s(name) // F16 converted to float32
		fmt.Println(name, t.DType, t.Shape, v)
	}
	w, _ := f.Tensor("lm_head.weight")
	view, _ := w.Float32View() // no copy: a view of the mapped file
	fmt.Println(view[5])
	// Output:
	// lm_head.weight F32 [2 3] [1 2 3 4 5 6]
	// model.norm.weight F16 [3] [1 0.5 -2]
	// 6
}

func ExampleOpenDir() {
	dir, _ := os.MkdirTemp("", "st")
	defer os.RemoveAll(dir)
	for i, name := range []string{"model.embed_tokens.weight", "lm_head.weight"} {
		var b bytes.Buffer
		safetensors.Write(&b, []safetensors.Tensor{
			safetensors.FromFloat32s(name, []int{2, 2}, []float32{1, 2, 3, float32(i)}),
		}, nil)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)), b.Bytes(), 0o644)
	}
	os.WriteFile(filepath.Join(dir, safetensors.IndexFile), []byte(`{"weight_map": {
		"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
		"lm_head.weight": "model-00002-of-00002.safetensors"}}`), 0o644)

	// One lookup over both shards.
	c, err := safetensors.OpenDir(dir)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	head, _ := c.Float32s("lm_head.weight")
	fmt.Println(c.Names(), head)
	// Output: [model.embed_tokens.weight lm_head.weight] [1 2 3 1]
}
