package abi_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// A request is a list of named tensors; Decode views the data in place.
func Example() {
	msg := abi.Encode(nil, []abi.Tensor{
		abi.F32("scores", []int64{1, 3}, []float32{0.1, 0.7, 0.2}),
		abi.Str("arg.threshold", "0.5"),
	})
	ts, err := abi.Decode(msg)
	if err != nil {
		fmt.Println(err)
		return
	}
	s, _ := abi.Find(ts, "scores")
	v, _ := s.Float32s()
	fmt.Println(len(msg), s, v)
	// Output: 112 scores float32[1 3] [0.1 0.7 0.2]
}
