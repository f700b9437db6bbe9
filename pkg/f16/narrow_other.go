//go:build !amd64

package f16

func narrow(dst []uint16, src []float32) { narrowGeneric(dst, src) }
