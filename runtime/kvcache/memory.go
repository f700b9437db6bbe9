package kvcache

import (
	"fmt"
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
	mem []byte // the whole mapping; nil once unmapped

	keyBytes, valueBytes []([]byte) // per layer, raw
	keyF32, valueF32     [][]float32
	keyI8, valueI8       [][]int8
	keyScale, valueScale [][]float32
}

// mapZeroed returns n zeroed bytes from an anonymous private mapping.
// Unless prefault is set the kernel hands out zero pages lazily, so an
// unused budget costs no RSS; either way masked slots read as 0.0 (finite)
// as the graph's softmax requires.
func mapZeroed(n int, prefault bool) ([]byte, error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANON
	if prefault {
		flags |= unix.MAP_POPULATE
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("kvcache: mmap %d bytes: %w", n, err)
	}
	return b, nil
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
	mem, err := mapZeroed(total, cfg.Prefault)
	if err != nil {
		return nil, err
	}
	p := &pools{mem: mem}
	off := 0
	next := func(n, stride int) []byte {
		b := mem[off : off+n : off+n]
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

func asInt8(b []byte) []int8 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int8)(unsafe.Pointer(&b[0])), len(b))
}
