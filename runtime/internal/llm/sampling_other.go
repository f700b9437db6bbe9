//go:build !amd64

package llm

func expScaled(c []candidate, maxL, inv float32) float64 { return expScaledGo(c, maxL, inv) }
