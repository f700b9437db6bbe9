package plugins_test

import (
	"syscall"
	"unsafe"
)

// threadCPU is the calling OS thread's CPU time (CLOCK_THREAD_CPUTIME_ID),
// and whether the clock could be read.
func threadCPU() (int64, bool) {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false
	}
	return ts.Nano(), true
}
