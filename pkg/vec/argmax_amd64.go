package vec

import "golang.org/x/sys/cpu"

// useAVX2 picks Argmax's vector path. The Go one takes ~1.8 cycles an
// element on random logits (its branches mispredict while the maximum
// still moves), ~10-17 µs a 32k row, eight of them a batch-8 decode
// step's sampling; the vector path reads a row in a few hundred cycles
// (BenchmarkArgmax).
var useAVX2 = cpu.X86.HasAVX2

//go:noescape
func maxAVX2(x []float32) float32

//go:noescape
func indexAVX2(x []float32, v float32) int

// argmax is Argmax on the vector path: the maximum (maxOf), then
// its first index in blocks of 8, the tails in Go.
func argmax(x []float32) int {
	if !useAVX2 || len(x) < 32 {
		return argmaxGeneric(x)
	}
	best := maxOf(x)
	m := len(x) &^ 7
	if j := indexAVX2(x[:m], best); j >= 0 {
		return j
	}
	for j, v := range x[m:] {
		if v == best {
			return m + j
		}
	}
	return 0
}

// maxOf is Max on the vector path: blocks of 32, the tail in Go.
func maxOf(x []float32) float32 {
	if !useAVX2 || len(x) < 32 {
		return maxGeneric(x)
	}
	n := len(x) &^ 31
	best := maxAVX2(x[:n])
	for _, v := range x[n:] {
		if v > best {
			best = v
		}
	}
	return best
}
