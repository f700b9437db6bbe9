//go:build !amd64

package vec

func argmax(x []float32) int { return argmaxGeneric(x) }

func maxOf(x []float32) float32 { return maxGeneric(x) }
