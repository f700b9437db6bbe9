package llm

import "golang.org/x/sys/cpu"

// useAVX2 and useAVX512 pick expWeights' vector paths
// (BenchmarkSampleFullVocab's t1 cases measure them against the Go loop
// they repeat).
var (
	useAVX2   = cpu.X86.HasAVX2
	useAVX512 = cpu.X86.HasAVX512F
)

//go:noescape
func expWeightsAVX2(w, x []float32, maxL, inv float32) float64

//go:noescape
func expWeightsAVX512(w, x []float32, maxL, inv float32) float64

// expWeights is expWeightsGo, sixteen logits at a time where the CPU has
// AVX-512 and eight where it has AVX2: the same values, bit for bit
// (TestExpWeightsVector), the sum in another order.
func expWeights(w, x []float32, maxL, inv float32) float64 {
	w = w[:len(x)]
	var sum float64
	if n := len(x) &^ 15; useAVX512 && n > 0 {
		sum = expWeightsAVX512(w[:n], x[:n], maxL, inv)
		w, x = w[n:], x[n:]
	}
	if n := len(x) &^ 7; useAVX2 && n > 0 {
		sum += expWeightsAVX2(w[:n], x[:n], maxL, inv)
		w, x = w[n:], x[n:]
	}
	return sum + expWeightsGo(w, x, maxL, inv)
}
