package quant_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/quant"
)

// Box agreement between a reference detector's probability map and its
// quantised model's: threshold, connected components, IoU matching.
func ExampleMapBoxes() {
	const h, w = 4, 6
	ref := []float32{
		0, 0.9, 0.9, 0, 0, 0,
		0, 0.9, 0.9, 0, 0.8, 0.8,
		0, 0, 0, 0, 0.8, 0.8,
		0, 0, 0, 0, 0, 0,
	}
	got := []float32{
		0, 0.9, 0.9, 0, 0, 0,
		0, 0.9, 0.9, 0, 0.2, 0.2, // the second word fell under 0.3
		0, 0, 0, 0, 0.2, 0.2,
		0, 0, 0, 0, 0, 0,
	}
	rb, qb := quant.MapBoxes(ref, h, w, 0.3, 1), quant.MapBoxes(got, h, w, 0.3, 1)
	m := quant.MatchBoxes(rb, qb, 0.5)
	fmt.Printf("reference %d quantised %d matched %d; cosine %.3f\n", len(rb), len(qb), m, quant.Cosine(ref, got))
	// Output: reference 2 quantised 1 matched 1; cosine 0.874
}
