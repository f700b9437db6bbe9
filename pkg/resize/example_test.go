package resize_test

import (
	"fmt"
	"image"
	"image/color"

	"github.com/edgeinfer/edgeinfer/pkg/resize"
)

func Example() {
	img := image.NewGray(image.Rect(0, 0, 2, 2))
	img.Set(1, 0, color.Gray{255})
	img.Set(1, 1, color.Gray{255})
	// A 4×2 NCHW input: each row ramps from black to white.
	v := resize.Bilinear(img, 4, 2, resize.CHW)
	fmt.Println(v[:4])
	// Output: [0 0.25 0.75 1]
}
