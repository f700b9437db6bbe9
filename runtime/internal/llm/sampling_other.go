//go:build !amd64

package llm

func expWeights(w, x []float32, maxL, inv float32) float64 {
	return expWeightsGo(w[:len(x)], x, maxL, inv)
}
