package bundle_test

import (
	"context"
	"fmt"
	"os"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
)

// Build a synthetic decoder bundle, then load it back (checksums verified).
func Example() {
	dir, _ := os.MkdirTemp("", "bundle")
	defer os.RemoveAll(dir)
	cfg, weights, _ := llama.Preset("tiny-test")
	_, err := build.BuildDecoder(context.Background(), dir, build.DecoderSpec{
		Name: "tiny", Version: "1", Config: cfg, Weights: weights, CreatedBy: "example",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := bundle.Load(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	g := b.Manifest.Geometry
	fmt.Println(b.Manifest.Kind, b.Manifest.Contract, g.Layers, g.KVHeads, g.HeadDim, g.BlockSize, g.Logits)
	for _, f := range b.Manifest.Files {
		fmt.Println(f.Path)
	}
	// Output:
	// decoder paged 2 2 16 16 last
	// model.onnx
	// model.onnx.data
}
