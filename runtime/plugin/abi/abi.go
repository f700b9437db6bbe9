// Package abi is the wire format between the plugin host (runtime/plugin)
// and a plugin (a WebAssembly module): a list of named tensors in, a list
// of named tensors out, or an error message. It is pure Go with no
// dependencies so that the host and Go guests (runtime/plugin/guest) share
// one encoder and one decoder; a plugin in Rust, C or Zig implements the
// same few rules, written out in runtime/plugin/ABI.md.
//
// A message is little-endian:
//
//	"EIT1" u32 count, then count entries:
//	  u32 name length, name (UTF-8, at most MaxName bytes)
//	  u8 dtype, u8 rank (at most MaxRank), u8 flags, u8 zero
//	  rank x i64 dimensions (each >= 0)
//	  u64 data length (= product of dimensions x element size)
//	  zero padding to a multiple of 8 bytes from the message start
//	  data, then zero padding to a multiple of 8
//	  (flags bit 0, FlagHeld: the host holds the data; in its place
//	  come u32 handle, u32 zero: see Tensor.Handle)
//
// or, for an error the plugin reports: "EIER" u32 length, UTF-8 message.
//
// Data is 8-byte aligned in the message so that both sides can view it in
// place as []float32 / []int64 without a copy when the buffer itself is
// aligned (Go allocations and the guest kit's buffers are).
package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"unicode/utf8"
	"unsafe"
)

// Version is the ABI revision a plugin reports from edgeinfer_abi_version.
const Version = 1

// Limits a decoder enforces on any message.
const (
	MaxName    = 256
	MaxRank    = 8
	MaxEntries = 4096
	MaxError   = 64 << 10
)

var (
	magicTensors = [4]byte{'E', 'I', 'T', '1'}
	magicError   = [4]byte{'E', 'I', 'E', 'R'}
)

// ErrMalformed reports a message that breaks the format; the error says
// which rule and at which byte offset.
var ErrMalformed = errors.New("abi: malformed message")

// GuestError is an error a plugin reported through an error message.
type GuestError struct{ Msg string }

func (e *GuestError) Error() string { return "plugin error: " + e.Msg }

// DType is a tensor's element type.
type DType uint8

const (
	Float32 DType = 1
	Int64   DType = 2
	Int32   DType = 3
	Uint8   DType = 4
	Float64 DType = 5
	// String is UTF-8 text (or any bytes) of shape [len].
	String DType = 6
)

// Size is the element size in bytes, 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case Int64, Float64:
		return 8
	case Uint8, String:
		return 1
	}
	return 0
}

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Int64:
		return "int64"
	case Int32:
		return "int32"
	case Uint8:
		return "uint8"
	case Float64:
		return "float64"
	case String:
		return "string"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Tensor is one named array. Data holds the elements little-endian; after
// Decode it aliases the decoded buffer.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
	// Handle, when not 0, says the host holds the data and Data is empty:
	// a plugin that asked for it (ABI.md, "Held tensors") gets a large
	// input as a handle it passes to the host's primitives without the
	// megabytes ever being copied into the sandbox, and reads it only if
	// it must (guest.Read). Handles are valid for the request they came
	// with.
	Handle uint32
}

// FlagHeld marks an entry whose data the host holds (Tensor.Handle).
const FlagHeld = 1

// Held reports whether the host holds t's data (Tensor.Handle).
func (t Tensor) Held() bool { return t.Handle != 0 }

// ByteLen is the length of t's data, held or not.
func (t Tensor) ByteLen() uint64 {
	n, _ := elements(t.Shape, t.DType.Size())
	return n
}

// Elements is the product of the shape (1 for a scalar).
func (t Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

func (t Tensor) String() string { return fmt.Sprintf("%s %s%v", t.Name, t.DType, t.Shape) }

// Find returns the tensor called name.
func Find(ts []Tensor, name string) (Tensor, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// view reinterprets b as []T without a copy when the machine is
// little-endian and b is aligned, else decodes a copy.
func view[T float32 | int64 | int32 | float64](b []byte, size int, dec func([]byte) T) []T {
	n := len(b) / size
	if n == 0 {
		return []T{}
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%uintptr(size) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]T, n)
	for i := range out {
		out[i] = dec(b[i*size:])
	}
	return out
}

func bytesOf[T float32 | int64 | int32 | float64](v []T, size int, enc func([]byte, T)) []byte {
	if len(v) == 0 {
		return []byte{}
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*size)
	}
	out := make([]byte, len(v)*size)
	for i, x := range v {
		enc(out[i*size:], x)
	}
	return out
}

func le32f(b []byte) float32     { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }
func le64f(b []byte) float64     { return math.Float64frombits(binary.LittleEndian.Uint64(b)) }
func le64i(b []byte) int64       { return int64(binary.LittleEndian.Uint64(b)) }
func le32i(b []byte) int32       { return int32(binary.LittleEndian.Uint32(b)) }
func put32f(b []byte, v float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(v)) }
func put64f(b []byte, v float64) { binary.LittleEndian.PutUint64(b, math.Float64bits(v)) }
func put64i(b []byte, v int64)   { binary.LittleEndian.PutUint64(b, uint64(v)) }
func put32i(b []byte, v int32)   { binary.LittleEndian.PutUint32(b, uint32(v)) }

func (t Tensor) check(d DType) error {
	if t.Handle != 0 {
		return fmt.Errorf("abi: tensor %q is held by the host (handle %d): pass it to a host primitive, or read it first (guest.Read)", t.Name, t.Handle)
	}
	if t.DType != d {
		return fmt.Errorf("abi: tensor %q is %s, want %s", t.Name, t.DType, d)
	}
	return nil
}

// Float32s returns the elements of a float32 tensor (a view when possible:
// do not keep it past the buffer's life).
func (t Tensor) Float32s() ([]float32, error) {
	if err := t.check(Float32); err != nil {
		return nil, err
	}
	return view(t.Data, 4, le32f), nil
}

// Int64s returns the elements of an int64 tensor.
func (t Tensor) Int64s() ([]int64, error) {
	if err := t.check(Int64); err != nil {
		return nil, err
	}
	return view(t.Data, 8, le64i), nil
}

// Int32s returns the elements of an int32 tensor.
func (t Tensor) Int32s() ([]int32, error) {
	if err := t.check(Int32); err != nil {
		return nil, err
	}
	return view(t.Data, 4, le32i), nil
}

// Float64s returns the elements of a float64 tensor.
func (t Tensor) Float64s() ([]float64, error) {
	if err := t.check(Float64); err != nil {
		return nil, err
	}
	return view(t.Data, 8, le64f), nil
}

// Text returns a String tensor's contents.
func (t Tensor) Text() (string, error) {
	if err := t.check(String); err != nil {
		return "", err
	}
	return string(t.Data), nil
}

// F32 makes a float32 tensor over v (no copy on little-endian machines).
func F32(name string, shape []int64, v []float32) Tensor {
	return Tensor{Name: name, DType: Float32, Shape: shape, Data: bytesOf(v, 4, put32f)}
}

// I64 makes an int64 tensor over v.
func I64(name string, shape []int64, v []int64) Tensor {
	return Tensor{Name: name, DType: Int64, Shape: shape, Data: bytesOf(v, 8, put64i)}
}

// I32 makes an int32 tensor over v.
func I32(name string, shape []int64, v []int32) Tensor {
	return Tensor{Name: name, DType: Int32, Shape: shape, Data: bytesOf(v, 4, put32i)}
}

// F64 makes a float64 tensor over v.
func F64(name string, shape []int64, v []float64) Tensor {
	return Tensor{Name: name, DType: Float64, Shape: shape, Data: bytesOf(v, 8, put64f)}
}

// Bytes makes a uint8 tensor of shape [len(b)].
func Bytes(name string, b []byte) Tensor {
	return Tensor{Name: name, DType: Uint8, Shape: []int64{int64(len(b))}, Data: b}
}

// Str makes a String tensor.
func Str(name, s string) Tensor {
	return Tensor{Name: name, DType: String, Shape: []int64{int64(len(s))}, Data: []byte(s)}
}

func pad8(n int) int { return (8 - n%8) % 8 }

// EncodedSize is the length Encode will produce.
func EncodedSize(ts []Tensor) int {
	n := 8
	for _, t := range ts {
		n += 4 + len(t.Name)
		n += 4 + 8*len(t.Shape) + 8
		if t.Handle != 0 {
			n += pad8(n) + 8
			continue
		}
		n += pad8(n) + len(t.Data)
		n += pad8(n)
	}
	return n
}

// Validate checks what Encode needs: names, types, ranks and data lengths
// that agree with the shapes.
func Validate(ts []Tensor) error {
	if len(ts) > MaxEntries {
		return fmt.Errorf("abi: %d tensors (at most %d)", len(ts), MaxEntries)
	}
	for _, t := range ts {
		if len(t.Name) > MaxName || !utf8.ValidString(t.Name) {
			return fmt.Errorf("abi: tensor name %.40q: at most %d bytes of UTF-8", t.Name, MaxName)
		}
		if t.DType.Size() == 0 {
			return fmt.Errorf("abi: tensor %q has unknown %s", t.Name, t.DType)
		}
		if len(t.Shape) > MaxRank {
			return fmt.Errorf("abi: tensor %q has rank %d (at most %d)", t.Name, len(t.Shape), MaxRank)
		}
		n, ok := elements(t.Shape, t.DType.Size())
		if t.Handle != 0 {
			if !ok || len(t.Data) != 0 {
				return fmt.Errorf("abi: tensor %q held by the host (handle %d) has a shape %v of %s that overflows or %d bytes of data besides", t.Name, t.Handle, t.Shape, t.DType, len(t.Data))
			}
			continue
		}
		if !ok || n != uint64(len(t.Data)) {
			return fmt.Errorf("abi: tensor %q: shape %v of %s needs %d bytes, has %d", t.Name, t.Shape, t.DType, n, len(t.Data))
		}
	}
	return nil
}

// elements is the byte length of a shape, false on a negative dimension
// or overflow past 2^48 bytes.
func elements(shape []int64, size int) (uint64, bool) {
	n := uint64(size)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<48 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// Encode appends the message for ts to dst. It panics on tensors Validate
// rejects: call Validate on data you did not make.
func Encode(dst []byte, ts []Tensor) []byte {
	if err := Validate(ts); err != nil {
		panic(err)
	}
	base := len(dst)
	dst = append(dst, magicTensors[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(ts)))
	for _, t := range ts {
		dst = appendHead(dst, t)
		if t.Handle != 0 {
			dst = binary.LittleEndian.AppendUint64(dst, t.ByteLen())
			dst = append(dst, make([]byte, pad8(len(dst)-base))...)
			dst = binary.LittleEndian.AppendUint32(dst, t.Handle)
			dst = binary.LittleEndian.AppendUint32(dst, 0)
			continue
		}
		dst = binary.LittleEndian.AppendUint64(dst, uint64(len(t.Data)))
		dst = append(dst, make([]byte, pad8(len(dst)-base))...)
		dst = append(dst, t.Data...)
		dst = append(dst, make([]byte, pad8(len(dst)-base))...)
	}
	return dst
}

// EncodeError appends an error message (cut to MaxError bytes).
func EncodeError(dst []byte, msg string) []byte {
	if len(msg) > MaxError {
		msg = msg[:MaxError]
	}
	dst = append(dst, magicError[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(msg)))
	return append(dst, msg...)
}

// Decode parses a message. Tensors alias b. A plugin's error message comes
// back as a *GuestError; anything else off the format wraps ErrMalformed.
// Decode never panics and allocates only in proportion to len(b).
func Decode(b []byte) ([]Tensor, error) {
	if len(b) < 8 {
		return nil, malformed(0, "%d bytes, shorter than a header", len(b))
	}
	count := binary.LittleEndian.Uint32(b[4:])
	switch [4]byte(b[:4]) {
	case magicError:
		if uint64(count) != uint64(len(b)-8) || count > MaxError {
			return nil, malformed(4, "error message length %d, %d bytes follow", count, len(b)-8)
		}
		return nil, &GuestError{Msg: string(b[8:])}
	case magicTensors:
	default:
		return nil, malformed(0, "magic %q, want %q or %q", b[:4], magicTensors[:], magicError[:])
	}
	if count > MaxEntries {
		return nil, malformed(4, "%d tensors (at most %d)", count, MaxEntries)
	}
	// Each entry takes at least 24 bytes: a count larger than that allows
	// is a lie, refused before allocating for it.
	if uint64(count)*24 > uint64(len(b)) {
		return nil, malformed(4, "%d tensors cannot fit in %d bytes", count, len(b))
	}
	ts := make([]Tensor, 0, count)
	off := 8
	need := func(n uint64) bool { return n <= uint64(len(b)-off) }
	for i := range int(count) {
		name, dt, shape, flags, next, err := entryHead(b, off, i, 8)
		if err != nil {
			return nil, err
		}
		off = next
		size := binary.LittleEndian.Uint64(b[off:])
		off += 8
		want, ok := elements(shape, dt.Size())
		if !ok || want != size {
			return nil, malformed(off-8, "tensor %q: shape %v of %s needs %d bytes, says %d", name, shape, dt, want, size)
		}
		off += pad8(off)
		if flags == FlagHeld {
			if off > len(b) || !need(8) {
				return nil, malformed(off, "tensor %q: held, truncated handle", name)
			}
			h, zero := binary.LittleEndian.Uint32(b[off:]), binary.LittleEndian.Uint32(b[off+4:])
			if h == 0 || zero != 0 {
				return nil, malformed(off, "tensor %q: held with handle %d and reserved %d (want a handle > 0 and 0)", name, h, zero)
			}
			off += 8
			ts = append(ts, Tensor{Name: name, DType: dt, Shape: shape, Data: []byte{}, Handle: h})
			continue
		}
		if off > len(b) || !need(size) {
			return nil, malformed(off, "tensor %q: %d data bytes, %d left", name, size, max(len(b)-off, 0))
		}
		data := b[off : off+int(size) : off+int(size)]
		off += int(size)
		off = min(off+pad8(off), len(b))
		ts = append(ts, Tensor{Name: name, DType: dt, Shape: shape, Data: data})
	}
	if off != len(b) {
		return nil, malformed(off, "%d bytes after the last tensor", len(b)-off)
	}
	return ts, nil
}

// appendHead appends the part of t's entry both message forms share
// (name, type, rank, shape), which entryHead parses.
func appendHead(dst []byte, t Tensor) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(t.Name)))
	dst = append(dst, t.Name...)
	var flags byte
	if t.Handle != 0 {
		flags = FlagHeld
	}
	dst = append(dst, byte(t.DType), byte(len(t.Shape)), flags, 0)
	for _, d := range t.Shape {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(d))
	}
	return dst
}

// malformed is ErrMalformed at byte off of a message.
func malformed(off int, format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrMalformed, off, fmt.Sprintf(format, args...))
}

// entryHead parses the part of entry i at off that both message forms
// share (name, type, rank, flags, shape), checks that tail more bytes
// follow it, and returns the offset after the shape.
func entryHead(b []byte, off, i, tail int) (name string, dt DType, shape []int64, flags byte, next int, err error) {
	need := func(n uint64) bool { return n <= uint64(len(b)-off) }
	if !need(4) {
		return "", 0, nil, 0, 0, malformed(off, "tensor %d: truncated name length", i)
	}
	nl := binary.LittleEndian.Uint32(b[off:])
	off += 4
	if nl > MaxName || !need(uint64(nl)+4) {
		return "", 0, nil, 0, 0, malformed(off, "tensor %d: name length %d", i, nl)
	}
	nb := b[off : off+int(nl)]
	if !utf8.Valid(nb) {
		return "", 0, nil, 0, 0, malformed(off, "tensor %d: name is not UTF-8", i)
	}
	name = string(nb)
	off += int(nl)
	dt, rank, flags := DType(b[off]), int(b[off+1]), b[off+2]
	if dt.Size() == 0 {
		return "", 0, nil, 0, 0, malformed(off, "tensor %q: unknown %s", name, dt)
	}
	if rank > MaxRank || flags&^FlagHeld != 0 || b[off+3] != 0 {
		return "", 0, nil, 0, 0, malformed(off, "tensor %q: rank %d (at most %d), flags %d (only %d is defined), reserved byte %d", name, rank, MaxRank, flags, FlagHeld, b[off+3])
	}
	off += 4
	if !need(uint64(8*rank) + uint64(tail)) {
		return "", 0, nil, 0, 0, malformed(off, "tensor %q: truncated shape", name)
	}
	shape = make([]int64, rank)
	for d := range shape {
		shape[d] = int64(binary.LittleEndian.Uint64(b[off:]))
		off += 8
	}
	return name, dt, shape, flags, off, nil
}
