package quant_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/quant"
)

func ExampleParseScheme() {
	s, err := quant.ParseScheme("int4-b64")
	if err != nil {
		panic(err)
	}
	fmt.Println(s, s.Bits(), s.BlockSize, s.AccuracyLevel)
	// Output: int4-b64-acc4 4 64 4
}

func ExampleQuantizeBlockwise() {
	w := []float32{0.5, -1, 0.25, 0, 1, 2, -2, 0.75} // [N=1, K=8]
	q, err := quant.QuantizeBlockwise(w, 1, 8, 4, 16, false)
	if err != nil {
		panic(err)
	}
	fmt.Printf("blocks %d, bytes %d, rel rms %.3f\n", q.Blocks(), q.Bytes(), quant.RelativeRMS(w, q.Dequantize()))
	// Output: blocks 1, bytes 12, rel rms 0.076
}
