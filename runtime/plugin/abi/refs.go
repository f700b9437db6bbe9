package abi

import (
	"encoding/binary"
)

// A request to a host primitive may name its tensors' data where it lies
// in the guest's memory instead of copying it into the message: a plugin
// passes a recogniser's 2 MB output to the host's argmax without a copy
// (BenchmarkCTC in runtime/plugin/plugins). The form is little-endian:
//
//	"EIR1" u32 count, then count entries:
//	  u32 name length, name (UTF-8, at most MaxName bytes)
//	  u8 dtype, u8 rank (at most MaxRank), u8 flags, u8 zero
//	  rank x i64 dimensions (each >= 0)
//	  u32 data address in the guest's memory (flags FlagHeld: the
//	  handle of data the host holds), u32 zero
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
		dst = appendHead(dst, t)
		var a uint32
		switch {
		case t.Handle != 0:
			a = t.Handle
		case len(t.Data) > 0:
			a = addr(t.Data)
		}
		dst = binary.LittleEndian.AppendUint32(dst, a)
		dst = binary.LittleEndian.AppendUint32(dst, 0)
		dst = binary.LittleEndian.AppendUint64(dst, t.ByteLen())
	}
	return dst
}

// DecodeRefs parses a by-reference message; read returns the n bytes at a
// guest address (false when they are outside its memory), held the data
// the host holds under a handle (false for a handle it does not have),
// which the tensors alias. It never panics and allocates only in
// proportion to len(b).
func DecodeRefs(b []byte, read func(addr uint32, n uint32) ([]byte, bool), held func(handle uint32) ([]byte, bool)) ([]Tensor, error) {
	if len(b) < 8 || !IsRefs(b) {
		return nil, malformed(0, "not a by-reference message (%d bytes)", len(b))
	}
	count := binary.LittleEndian.Uint32(b[4:])
	// Each entry takes at least 28 bytes.
	if count > MaxEntries || uint64(count)*28 > uint64(len(b)) {
		return nil, malformed(4, "%d tensors in %d bytes (at most %d)", count, len(b), MaxEntries)
	}
	ts := make([]Tensor, 0, count)
	off := 8
	for i := range int(count) {
		name, dt, shape, flags, next, err := entryHead(b, off, i, 16)
		if err != nil {
			return nil, err
		}
		off = next
		addr, zero := binary.LittleEndian.Uint32(b[off:]), binary.LittleEndian.Uint32(b[off+4:])
		size := binary.LittleEndian.Uint64(b[off+8:])
		off += 16
		want, ok := elements(shape, dt.Size())
		if !ok || want != size || zero != 0 || size > 1<<32-1 {
			return nil, malformed(off-16, "tensor %q: shape %v of %s needs %d bytes, says %d", name, shape, dt, want, size)
		}
		var data []byte
		if flags == FlagHeld {
			if data, ok = held(addr); !ok || uint64(len(data)) != size {
				return nil, malformed(off-16, "tensor %q: handle %d of %d bytes is not one the host holds for this request", name, addr, size)
			}
		} else if size > 0 {
			if data, ok = read(addr, uint32(size)); !ok {
				return nil, malformed(off-16, "tensor %q: %d bytes at address %d are outside the guest's memory", name, size, addr)
			}
		}
		ts = append(ts, Tensor{Name: name, DType: dt, Shape: shape, Data: data[:len(data):len(data)]})
	}
	if off != len(b) {
		return nil, malformed(off, "%d bytes after the last tensor", len(b)-off)
	}
	return ts, nil
}
