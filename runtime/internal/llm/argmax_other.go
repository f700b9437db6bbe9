//go:build !amd64

package llm

// argmax returns the first index of the largest value (ties go to the lower
// id, as torch.argmax does). NaNs are never the maximum; with no number
// above −Inf it returns 0.
func argmax(x []float32) int32 { return argmaxGeneric(x) }
