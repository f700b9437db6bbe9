package npy_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/pkg/npy"
)

func Example() {
	raw := npy.EncodeFloat32([]int64{2, 2}, []float32{1, 2, 3, 4})
	a, err := npy.Parse(raw)
	if err != nil {
		fmt.Println(err)
		return
	}
	v, _ := a.Float32()
	fmt.Println(a.Descr, a.Shape, v)
	// Output: <f4 [2 2] [1 2 3 4]
}
