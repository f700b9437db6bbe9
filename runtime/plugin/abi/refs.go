package abi

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// A request to a host primitive may name its tensors' data where it lies
// in the guest's memory instead of copying it into the message: a plugin
// passes a recogniser's 2 MB output to the host's argmax without a copy
// (BenchmarkCTC in runtime/plugin/plugins). The form is little-endian:
//
//	"EIR1" u32 count, then count entries:
//	  u32 name length, name (UTF-8, at most MaxName bytes)
//	  u8 dtype, u8 rank (at most MaxRank), u16 zero
//	  rank x i64 dimensions (each >= 0)
//	  u32 data address in the guest's memory, u32 zero
//	  u64 data length (= product of dimensions x element size)
var magicRefs = [4]byte{'E', 'I', 'R', '1'}

// IsRefs reports whether b is a by-reference message.
func IsRefs(b []byte) bool { return len(b) >= 4 && [4]byte(b[:4]) == magicRefs }

// EncodeRefs appends the by-reference message for ts to dst; addr gives the
// address of a tensor's data (a guest's own pointer). It panics on tensors
// Validate rejects.
func EncodeRefs(dst []byte, ts []Tensor, addr func([]byte) uint32) []byte {
	if err := Validate(ts); err != nil {
		panic(err)
	}
	dst = append(dst, magicRefs[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(ts)))
	for _, t := range ts {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(t.Name)))
		dst = append(dst, t.Name...)
		dst = append(dst, byte(t.DType), byte(len(t.Shape)), 0, 0)
		for _, d := range t.Shape {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(d))
		}
		var a uint32
		if len(t.Data) > 0 {
			a = addr(t.Data)
		}
		dst = binary.LittleEndian.AppendUint32(dst, a)
		dst = binary.LittleEndian.AppendUint32(dst, 0)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(len(t.Data)))
	}
	return dst
}

// DecodeRefs parses a by-reference message; read returns the n bytes at a
// guest address (false when they are outside its memory), which the
// tensors alias. It never panics and allocates only in proportion to
// len(b).
func DecodeRefs(b []byte, read func(addr uint32, n uint32) ([]byte, bool)) ([]Tensor, error) {
	bad := func(off int, format string, args ...any) error {
		return fmt.Errorf("%w: at byte %d: %s", ErrMalformed, off, fmt.Sprintf(format, args...))
	}
	if len(b) < 8 || !IsRefs(b) {
		return nil, bad(0, "not a by-reference message (%d bytes)", len(b))
	}
	count := binary.LittleEndian.Uint32(b[4:])
	// Each entry takes at least 28 bytes.
	if count > MaxEntries || uint64(count)*28 > uint64(len(b)) {
		return nil, bad(4, "%d tensors in %d bytes (at most %d)", count, len(b), MaxEntries)
	}
	ts := make([]Tensor, 0, count)
	off := 8
	need := func(n uint64) bool { return n <= uint64(len(b)-off) }
	for i := range int(count) {
		if !need(4) {
			return nil, bad(off, "tensor %d: truncated name length", i)
		}
		nl := binary.LittleEndian.Uint32(b[off:])
		off += 4
		if nl > MaxName || !need(uint64(nl)+4) {
			return nil, bad(off, "tensor %d: name length %d", i, nl)
		}
		name := b[off : off+int(nl)]
		if !utf8.Valid(name) {
			return nil, bad(off, "tensor %d: name is not UTF-8", i)
		}
		off += int(nl)
		dt, rank := DType(b[off]), int(b[off+1])
		if dt.Size() == 0 {
			return nil, bad(off, "tensor %q: unknown %s", name, dt)
		}
		if rank > MaxRank || b[off+2] != 0 || b[off+3] != 0 {
			return nil, bad(off, "tensor %q: rank %d (at most %d), reserved bytes %d %d", name, rank, MaxRank, b[off+2], b[off+3])
		}
		off += 4
		if !need(uint64(8*rank) + 16) {
			return nil, bad(off, "tensor %q: truncated shape or data reference", name)
		}
		shape := make([]int64, rank)
		for d := range shape {
			shape[d] = int64(binary.LittleEndian.Uint64(b[off:]))
			off += 8
		}
		addr, zero := binary.LittleEndian.Uint32(b[off:]), binary.LittleEndian.Uint32(b[off+4:])
		size := binary.LittleEndian.Uint64(b[off+8:])
		off += 16
		want, ok := elements(shape, dt.Size())
		if !ok || want != size || zero != 0 || size > 1<<32-1 {
			return nil, bad(off-16, "tensor %q: shape %v of %s needs %d bytes, says %d", name, shape, dt, want, size)
		}
		var data []byte
		if size > 0 {
			if data, ok = read(addr, uint32(size)); !ok {
				return nil, bad(off-16, "tensor %q: %d bytes at address %d are outside the guest's memory", name, size, addr)
			}
		}
		ts = append(ts, Tensor{Name: string(name), DType: dt, Shape: shape, Data: data[:len(data):len(data)]})
	}
	if off != len(b) {
		return nil, bad(off, "%d bytes after the last tensor", len(b)-off)
	}
	return ts, nil
}
