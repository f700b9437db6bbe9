package f16_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/pkg/f16"
)

func Example() {
	h := f16.FromFloat32(3.14159)
	fmt.Printf("%#04x %v\n", h, f16.ToFloat32(h))
	b := f16.BFloat16FromFloat32(3.14159)
	fmt.Printf("%#04x %v\n", b, f16.BFloat16ToFloat32(b))
	fmt.Printf("%#04x\n", f16.FromFloat32(1e6)) // beyond 65504: +Inf
	// Output:
	// 0x4248 3.140625
	// 0x4049 3.140625
	// 0x7c00
}
