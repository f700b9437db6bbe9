package guest_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
)

// A plugin is a handler registered from init; built with GOOS=wasip1 the
// kit exports it to the host. Natively, Call runs it through the same
// encoding, which is how a plugin's logic can be tested without wasm.
func Example() {
	guest.Handle(func(in []abi.Tensor) ([]abi.Tensor, error) {
		x, err := guest.Input(in, "x", abi.Float32)
		if err != nil {
			return nil, err
		}
		v, _ := x.Float32s()
		sum := float32(0)
		for _, f := range v {
			sum += f
		}
		return []abi.Tensor{abi.F32("sum", nil, []float32{sum})}, nil
	})
	resp := guest.Call(nil, abi.Encode(nil, []abi.Tensor{abi.F32("x", []int64{3}, []float32{1, 2, 3})}))
	out, _ := abi.Decode(resp)
	s, _ := out[0].Float32s()
	fmt.Println(out[0].Name, s)

	_, err := abi.Decode(guest.Call(nil, abi.Encode(nil, nil)))
	fmt.Println(err)
	// Output:
	// sum [6]
	// plugin error: no input "x" (float32); got []
}
