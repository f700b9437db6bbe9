//go:build linux

package ort

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// anonSnapshot lists the process's private anonymous mappings; nil when
// /proc is unreadable (then nothing is collapsed).
func anonSnapshot() []memRange {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	r, err := parseAnonMaps(data)
	if err != nil {
		return nil
	}
	return r
}

// collapseNew collapses into huge pages the 2 MiB chunks of anonymous
// memory mapped since before (a snapshot taken by anonSnapshot) that are at
// least 7/8 resident, and returns how many bytes it collapsed. Failures are
// not errors: the memory works the same in base pages.
func collapseNew(before []memRange) int64 {
	if before == nil {
		return 0
	}
	now := anonSnapshot()
	if now == nil {
		return 0
	}
	page := os.Getpagesize()
	if page != 4096 {
		return 0 // the 2 MiB huge page size assumes 4 KiB base pages
	}
	vec := make([]byte, hugePageSize/page)
	var done int64
	for _, c := range hugeChunks(subtract(now, before)) {
		if mincore(c.lo, vec) != nil {
			continue
		}
		resident := 0
		for _, v := range vec {
			resident += int(v & 1)
		}
		if resident*8 < len(vec)*7 {
			continue
		}
		if madvise(c.lo, unix.MADV_HUGEPAGE) != nil {
			return done // no transparent huge pages in this kernel
		}
		if madvise(c.lo, unix.MADV_COLLAPSE) == nil {
			done += hugePageSize
		}
	}
	return done
}

// mincore and madvise take the chunk's address as a number: the memory is
// ONNX Runtime's, never a Go pointer, and a 2 MiB chunk is all they touch.
func mincore(addr uintptr, vec []byte) error {
	_, _, e := unix.Syscall(unix.SYS_MINCORE, addr, hugePageSize, uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return e
	}
	return nil
}

func madvise(addr uintptr, advice int) error {
	_, _, e := unix.Syscall(unix.SYS_MADVISE, addr, hugePageSize, uintptr(advice))
	if e != 0 {
		return e
	}
	return nil
}
