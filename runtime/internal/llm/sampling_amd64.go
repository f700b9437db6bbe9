package llm

import "golang.org/x/sys/cpu"

// useAVX2 picks expScaled's vector path (BenchmarkSampleFullVocab's t1
// cases measure it against the Go loop it repeats).
var useAVX2 = cpu.X86.HasAVX2

//go:noescape
func expScaledAVX2(c []candidate, maxL, inv float32) float64

// expScaled is expScaledGo, eight candidates at a time where the CPU has
// AVX2: the same values, bit for bit (TestExpScaledVector), the sum in
// another order.
func expScaled(c []candidate, maxL, inv float32) float64 {
	var sum float64
	if n := len(c) &^ 7; useAVX2 && n > 0 {
		sum = expScaledAVX2(c[:n], maxL, inv)
		c = c[n:]
	}
	return sum + expScaledGo(c, maxL, inv)
}
