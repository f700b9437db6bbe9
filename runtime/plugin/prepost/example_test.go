package prepost_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

// CTC greedy decoding: repeats collapse, blanks (class 0) drop.
func ExampleCTCGreedy() {
	charset := prepost.PaddleCharset("a\nb\n") // blank, a, b, space
	probs := []float32{
		0.1, 0.8, 0.05, 0.05, // a
		0.1, 0.8, 0.05, 0.05, // a (repeat)
		0.9, 0.05, 0.03, 0.02, // blank
		0.1, 0.1, 0.7, 0.1, // b
	}
	r := prepost.CTCGreedy(probs, 4, 4, charset)
	fmt.Printf("%q %v\n", r.Text, r.Indices)
	// Output: "ab" [1 2]
}

// Silero VAD smoothing: 0.5 s of speech between silences at 16 kHz.
func ExampleVADSegments() {
	probs := make([]float32, 60) // 60 windows of 512 samples
	for i := 10; i < 26; i++ {
		probs[i] = 0.9
	}
	fmt.Println(prepost.VADSegments(probs, 60*512, prepost.SileroVAD))
	// Output: [{4640 13792}]
}
