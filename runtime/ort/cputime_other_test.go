//go:build !linux

package ort

// threadCPU is not measured off Linux; benchmarks then report 0.
func threadCPU() int64 { return 0 }
