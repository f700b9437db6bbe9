//go:build linux

package ort

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// residentSet is the set of 2 MiB chunks of the process's private anonymous
// memory that are at least 7/8 resident, taken before a session is created;
// nil when it cannot be known (then nothing is collapsed).
type residentSet map[uintptr]bool

// anonResident takes that snapshot.
func anonResident() residentSet {
	ranges := anonRanges()
	if ranges == nil || os.Getpagesize() != 4096 {
		return nil // the 2 MiB huge page size assumes 4 KiB base pages
	}
	set := residentSet{}
	vec := make([]byte, hugePageSize/4096)
	for _, c := range hugeChunks(ranges) {
		if mostlyResident(c.lo, vec) {
			set[c.lo] = true
		}
	}
	return set
}

// anonRanges lists the process's private anonymous mappings; nil when
// /proc is unreadable.
func anonRanges() []memRange {
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
// memory that became at least 7/8 resident since before was taken — the
// memory session creation filled — and returns how many bytes it
// collapsed. Failures are not errors: the memory works the same in base
// pages.
func collapseNew(before residentSet) int64 {
	if before == nil {
		return 0
	}
	vec := make([]byte, hugePageSize/4096)
	var done int64
	for _, c := range hugeChunks(anonRanges()) {
		if before[c.lo] || !mostlyResident(c.lo, vec) {
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

// mostlyResident reports whether at least 7/8 of the chunk at addr is in
// memory, so collapsing it commits next to nothing that was not in use.
func mostlyResident(addr uintptr, vec []byte) bool {
	if mincore(addr, vec) != nil {
		return false
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n*8 >= len(vec)*7
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
