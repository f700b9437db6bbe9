package ort

import (
	"bytes"
	"fmt"
	"strconv"
)

// ONNX Runtime keeps a model's weights — for quantised matmuls, the
// prepacked blocks its kernels read — in memory it allocates while the
// session is created, through the C library's malloc, in 4 KiB pages. A
// decode step reads all of them: ~80 MB for synthetic-110m int4, ~20,000
// pages, more than the TLB holds, so every step pays page walks. After
// creation, the anonymous memory that became resident while the session was
// created is collapsed into 2 MiB transparent huge pages (Linux ≥ 6.1,
// MADV_COLLAPSE; older kernels get the MADV_HUGEPAGE advice, which
// khugepaged acts on in the background). Only 2 MiB chunks at least 7/8
// resident are touched, so the collapse commits almost no memory that was
// not in use. "Became resident" rather than "newly mapped": a session
// created after others were closed reuses their memory, which a rule on
// new mappings would never collapse; large blocks are mappings of their own
// (pinMmapThreshold) and closing a session trims the C heap (trimHeap), so
// that reused memory becomes resident anew (TestSessionHugePages checks a
// session created after a closed one).

// memRange is the address range [lo, hi).
type memRange struct{ lo, hi uintptr }

// hugePageSize is the transparent huge page size with 4 KiB base pages
// (x86-64, arm64).
const hugePageSize = 2 << 20

// parseAnonMaps returns the private writable anonymous mappings listed in
// the text of /proc/self/maps ("lo-hi perms offset dev inode [path]"): no
// backing file, or the [heap]. Other lines are skipped; a line whose address
// field is malformed is an error.
func parseAnonMaps(data []byte) ([]memRange, error) {
	var out []memRange
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		f := bytes.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 5 {
			return nil, fmt.Errorf("ort: maps line %q: want at least 5 fields", line)
		}
		a, b, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			return nil, fmt.Errorf("ort: maps line %q: address range has no '-'", line)
		}
		lo, err1 := strconv.ParseUint(string(a), 16, 64)
		hi, err2 := strconv.ParseUint(string(b), 16, 64)
		if err1 != nil || err2 != nil || hi < lo {
			return nil, fmt.Errorf("ort: maps line %q: bad address range", line)
		}
		anon := len(f) == 5 || (len(f) == 6 && string(f[5]) == "[heap]")
		if string(f[1]) == "rw-p" && string(f[4]) == "0" && anon && hi > lo {
			out = append(out, memRange{uintptr(lo), uintptr(hi)})
		}
	}
	return out, nil
}

// hugeChunks cuts ranges into the whole 2 MiB-aligned chunks they contain.
func hugeChunks(ranges []memRange) []memRange {
	var out []memRange
	for _, r := range ranges {
		lo := (r.lo + hugePageSize - 1) &^ (hugePageSize - 1)
		for ; lo+hugePageSize <= r.hi; lo += hugePageSize {
			out = append(out, memRange{lo, lo + hugePageSize})
		}
	}
	return out
}
