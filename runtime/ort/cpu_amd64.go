package ort

import "golang.org/x/sys/cpu"

// kernelsOff is what the kernels leave out on this CPU (customops.go): an
// instruction set golang.org/x/sys/cpu reports absent, or switched off by
// GODEBUG=cpu.<name>=off. GODEBUG=cpu.avx512f=off,cpu.avxvnni=off runs the
// kernels of a CPU with AVX2 alone (AMD Zen 2 and 3, Intel's cores before
// Ice Lake).
func kernelsOff() uint {
	x := cpu.X86
	var off uint
	if !x.HasAVX2 || !x.HasFMA || !x.HasF16C {
		off |= cpuOffAVX2
	}
	if !x.HasAVXVNNI {
		off |= cpuOffAVXVNNI
	}
	// apart: a CPU with AVX-512 and no VNNI (Skylake-SP) runs the
	// attention kernel's AVX-512 code but not the products' 512-bit tile
	if !x.HasAVX512F || !x.HasAVX512BW || !x.HasAVX512VL || !x.HasAVX512DQ || !x.HasAVX512CD {
		off |= cpuOffAVX512
	}
	if !x.HasAVX512VNNI {
		off |= cpuOffAVX512VNNI
	}
	return off
}
