package llm

import "golang.org/x/sys/cpu"

// useAVX2 picks argmax's vector path. The generic one took 1.8 cycles an
// element on random logits (its branches mispredict while the maximum
// still moves), ~17 µs a 32k row, eight of them a batch-8 step's
// sampling; the vector path reads a row in a few hundred cycles
// (BenchmarkArgmax).
var useAVX2 = cpu.X86.HasAVX2

//go:noescape
func maxAVX2(x []float32) float32

//go:noescape
func indexAVX2(x []float32, v float32) int

// argmax returns the first index of the largest value (ties go to the lower
// id, as torch.argmax does). NaNs are never the maximum; with no number
// above −Inf it returns 0.
func argmax(x []float32) int32 {
	if !useAVX2 || len(x) < 32 {
		return argmaxGeneric(x)
	}
	n := len(x) &^ 31
	best := maxAVX2(x[:n])
	for _, v := range x[n:] {
		if v > best {
			best = v
		}
	}
	m := len(x) &^ 7
	if j := indexAVX2(x[:m], best); j >= 0 {
		return int32(j)
	}
	for j, v := range x[m:] {
		if v == best {
			return int32(m + j)
		}
	}
	return 0
}
