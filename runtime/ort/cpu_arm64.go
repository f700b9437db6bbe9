package ort

import "golang.org/x/sys/cpu"

// kernelsOff is what the kernels leave out on this CPU (customops.go):
// the dot-product variant where golang.org/x/sys/cpu reports no ASIMDDP,
// or GODEBUG=cpu.asimddp=off switches it off.
func kernelsOff() uint {
	if !cpu.ARM64.HasASIMDDP {
		return cpuOffDotProd
	}
	return 0
}
