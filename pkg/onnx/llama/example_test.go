package llama_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
)

// Build the tiny-test preset in the paged contract and list its step
// inputs and outputs: the attention kernel writes the step's keys and
// values into the pools at slots, so logits is the one output.
func Example() {
	cfg, weights, err := llama.Preset("tiny-test")
	if err != nil {
		fmt.Println(err)
		return
	}
	b := onnx.NewBuilder("tiny")
	if err := llama.Build(b, cfg, weights, llama.Options{Contract: llama.ContractPaged, BlockSize: 16}); err != nil {
		fmt.Println(err)
		return
	}
	data, err := b.Marshal()
	if err != nil {
		fmt.Println(err)
		return
	}
	r, _ := onnx.Inspect(data)
	for _, in := range r.Inputs[:7] {
		fmt.Println("in ", in.Name, in.Type, in.Shape)
	}
	for _, out := range r.Outputs {
		fmt.Println("out", out.Name, out.Type, out.Shape)
	}
	// Output:
	// in  input_ids int64 [batch seq]
	// in  position_ids int64 [batch seq]
	// in  block_tables int64 [batch max_blocks]
	// in  context_lens int64 [batch]
	// in  slots int64 [batch seq]
	// in  last_index int64 [batch]
	// in  key_cache.0 float32 [2 num_blocks 16 16]
	// out logits float32 [batch 256]
}
