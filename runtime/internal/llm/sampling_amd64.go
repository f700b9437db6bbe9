package llm

import "golang.org/x/sys/cpu"

// useAVX2 picks expWeights' vector path (BenchmarkSampleFullVocab's t1
// cases measure it against the Go loop it repeats).
var useAVX2 = cpu.X86.HasAVX2

//go:noescape
func expWeightsAVX2(w, x []float32, maxL, inv float32) float64

// expWeights is expWeightsGo, eight logits at a time where the CPU has
// AVX2: the same values, bit for bit (TestExpWeightsVector), the sum in
// another order.
func expWeights(w, x []float32, maxL, inv float32) float64 {
	w = w[:len(x)]
	var sum float64
	if n := len(x) &^ 7; useAVX2 && n > 0 {
		sum = expWeightsAVX2(w[:n], x[:n], maxL, inv)
		w, x = w[n:], x[n:]
	}
	return sum + expWeightsGo(w, x, maxL, inv)
}
