package ort

import (
	"syscall"
	"unsafe"
)

// threadCPU is the calling OS thread's CPU time in ns
// (CLOCK_THREAD_CPUTIME_ID: exact, where getrusage counts in ticks).
func threadCPU() int64 {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return ts.Nano()
}
