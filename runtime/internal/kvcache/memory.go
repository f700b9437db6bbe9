package kvcache

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pools is the cache's memory: one anonymous mapping, outside the Go heap
// (the GC never scans it, and ONNX Runtime may keep pointers into it), cut
// into per-layer key and value pools laid out head-major
// [kvHeads, numBlocks, blockSize, headDim] so that the decoder graph's
// Gather on axis 1 reads a block table without a transpose copy. For int8
// pools the per-(block, head) scales follow as [kvHeads, numBlocks] float32
// per layer.
type pools struct {
	mem  []byte // the whole mapping; nil once unmapped
	used []byte // the part the pools occupy (huge-page aligned within mem)

	keyBytes, valueBytes []([]byte) // per layer, raw
	keyF32, valueF32     [][]float32
	keyI8, valueI8       [][]int8
	keyF16, valueF16     [][]uint16 // IEEE float16 bits
	keyScale, valueScale [][]float32
}

// hugePage is the transparent huge page size of x86-64 and arm64 with 4 KiB
// base pages.
const hugePage = 2 << 20

// mapZeroed returns n zeroed bytes of an anonymous private mapping (mem,
// to unmap) and the n-byte region to use (used). Unless prefault is set the
// kernel hands out zero pages lazily, so an unused budget costs no RSS;
// either way masked slots read as 0.0 (finite) as the graph's softmax
// requires.
//
// With huge pages the mapping is advised MADV_HUGEPAGE and the region starts
// on a 2 MiB boundary. A decode step reads every block of every row in
// every layer, head by head: at batch 8 and context ~180 that is ~9,000
// distinct 4 KiB pages scattered over the budget, more than the TLB holds,
// while the same reads span a few hundred 2 MiB pages. (No benchmark here
// isolates it: two engines alternated in one process, one with
// KVOptions.DisableHugePages, under BenchmarkDecodeRate's load would.)
// Where the kernel has no transparent huge pages the advice fails and is
// ignored.
func mapZeroed(n int, prefault, huge bool) (mem, used []byte, err error) {
	if !huge {
		flags := unix.MAP_PRIVATE | unix.MAP_ANON
		if prefault {
			flags |= unix.MAP_POPULATE
		}
		b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, flags)
		if err != nil {
			return nil, nil, fmt.Errorf("kvcache: mmap %d bytes: %w", n, err)
		}
		return b, b, nil
	}
	// Map a huge page more than needed and use the aligned part: the
	// kernel can back only 2 MiB-aligned ranges with huge pages. The slack
	// is address space, never touched.
	b, err := unix.Mmap(-1, 0, n+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, nil, fmt.Errorf("kvcache: mmap %d bytes: %w", n+hugePage, err)
	}
	skip := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) % hugePage); r != 0 {
		skip = hugePage - r
	}
	used = b[skip : skip+n : skip+n]
	_ = unix.Madvise(used, unix.MADV_HUGEPAGE)
	if prefault {
		// MAP_POPULATE would fault base pages in before the advice applies;
		// populate after it (Linux ≥ 5.14), or touch every page.
		if unix.Madvise(used, unix.MADV_POPULATE_WRITE) != nil {
			page := os.Getpagesize()
			for i := 0; i < n; i += page {
				used[i] = 0
			}
		}
	}
	return b, used, nil
}

func newPools(cfg Config, numBlocks int) (*pools, error) {
	esize := cfg.DType.Size()
	poolElems := cfg.KVHeads * numBlocks * cfg.BlockSize * cfg.HeadDim
	poolBytes := poolElems * esize
	scaleElems := 0
	if cfg.DType == Int8 {
		scaleElems = cfg.KVHeads * numBlocks
	}
	// Data pools first, scales after, each region 64-byte aligned so every
	// view is aligned for its element type and for SIMD loads.
	align := func(n int) int { return (n + 63) &^ 63 }
	dataStride := align(poolBytes)
	scaleStride := align(scaleElems * 4)
	total := cfg.Layers * 2 * (dataStride + scaleStride)
	mem, used, err := mapZeroed(total, cfg.Prefault, !cfg.DisableHugePages)
	if err != nil {
		return nil, err
	}
	p := &pools{mem: mem, used: used}
	off := 0
	next := func(n, stride int) []byte {
		b := used[off : off+n : off+n]
		off += stride
		return b
	}
	for range cfg.Layers {
		p.keyBytes = append(p.keyBytes, next(poolBytes, dataStride))
		p.valueBytes = append(p.valueBytes, next(poolBytes, dataStride))
	}
	for l := range cfg.Layers {
		switch cfg.DType {
		case Float32:
			p.keyF32 = append(p.keyF32, asFloat32(p.keyBytes[l]))
			p.valueF32 = append(p.valueF32, asFloat32(p.valueBytes[l]))
		case Float16:
			p.keyF16 = append(p.keyF16, asUint16(p.keyBytes[l]))
			p.valueF16 = append(p.valueF16, asUint16(p.valueBytes[l]))
		case Int8:
			p.keyI8 = append(p.keyI8, asInt8(p.keyBytes[l]))
			p.valueI8 = append(p.valueI8, asInt8(p.valueBytes[l]))
			p.keyScale = append(p.keyScale, asFloat32(next(scaleElems*4, scaleStride)))
			p.valueScale = append(p.valueScale, asFloat32(next(scaleElems*4, scaleStride)))
		}
	}
	return p, nil
}

func (p *pools) unmap() error {
	if p.mem == nil {
		return nil
	}
	err := unix.Munmap(p.mem)
	*p = pools{}
	if err != nil {
		return fmt.Errorf("kvcache: munmap: %w", err)
	}
	return nil
}

func asFloat32(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func asUint16(b []byte) []uint16 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

func asInt8(b []byte) []int8 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int8)(unsafe.Pointer(&b[0])), len(b))
}
