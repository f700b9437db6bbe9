package npy

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Array is a decoded .npy file: its element type as NumPy writes it
// ("<f4", "|u1", ...), its shape and its raw data, little-endian, C order.
type Array struct {
	Descr string
	Shape []int64
	Data  []byte
}

// ItemSize is the bytes per element of each accepted dtype.
var ItemSize = map[string]int{
	"<f2": 2, "<f4": 4, "<f8": 8,
	"|i1": 1, "<i2": 2, "<i4": 4, "<i8": 8,
	"|u1": 1, "<u2": 2, "<u4": 4, "<u8": 8,
	"|b1": 1,
}

// MaxElements bounds an array (1 Gi elements) so that a hostile header
// cannot make a caller size a buffer beyond it.
const MaxElements = 1 << 30

var (
	descrRE   = regexp.MustCompile(`'descr'\s*:\s*'([^']*)'`)
	fortranRE = regexp.MustCompile(`'fortran_order'\s*:\s*(True|False)`)
	shapeRE   = regexp.MustCompile(`'shape'\s*:\s*\(([^)]*)\)`)
)

// Len returns the number of elements (1 for a scalar's empty shape).
func (a Array) Len() int64 {
	n := int64(1)
	for _, d := range a.Shape {
		n *= d
	}
	return n
}

// Float32 returns the elements of a '<f4' array.
func (a Array) Float32() ([]float32, error) {
	if a.Descr != "<f4" {
		return nil, fmt.Errorf("%w: dtype %q, want '<f4' (float32)", ErrFormat, a.Descr)
	}
	out := make([]float32, len(a.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:]))
	}
	return out, nil
}

// Parse decodes a .npy file. Data aliases b.
func Parse(b []byte) (Array, error) {
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return Array{}, fmt.Errorf("%w: no \\x93NUMPY magic", ErrFormat)
	}
	var hlen, off int
	switch b[6] {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		if len(b) < 12 {
			return Array{}, fmt.Errorf("%w: truncated header", ErrFormat)
		}
		hlen, off = int(binary.LittleEndian.Uint32(b[8:])), 12
	default:
		return Array{}, fmt.Errorf("%w: format version %d (this reads 1 to 3)", ErrFormat, b[6])
	}
	if hlen < 0 || hlen > len(b)-off {
		return Array{}, fmt.Errorf("%w: header of %d bytes in a %d-byte file", ErrFormat, hlen, len(b))
	}
	hdr := string(b[off : off+hlen])
	data := b[off+hlen:]
	d := descrRE.FindStringSubmatch(hdr)
	if d == nil {
		return Array{}, fmt.Errorf("%w: header has no 'descr'", ErrFormat)
	}
	size, ok := ItemSize[d[1]]
	if !ok {
		return Array{}, fmt.Errorf("%w: dtype %q (want a little-endian number or bool: <f4, <f8, <f2, <i8, <i4, <i2, |i1, |u1, <u2, <u4, <u8, |b1)", ErrFormat, d[1])
	}
	if f := fortranRE.FindStringSubmatch(hdr); f == nil || f[1] != "False" {
		return Array{}, fmt.Errorf("%w: Fortran order (save with np.ascontiguousarray)", ErrFormat)
	}
	m := shapeRE.FindStringSubmatch(hdr)
	if m == nil {
		return Array{}, fmt.Errorf("%w: header has no 'shape'", ErrFormat)
	}
	shape := []int64{}
	n := int64(1)
	for _, p := range strings.Split(m[1], ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || v < 0 || v > MaxElements {
			return Array{}, fmt.Errorf("%w: shape (%s)", ErrFormat, m[1])
		}
		shape = append(shape, v)
		if n *= v; n > MaxElements {
			return Array{}, fmt.Errorf("%w: shape (%s) is over %d elements", ErrFormat, m[1], MaxElements)
		}
	}
	if int64(len(data)) != n*int64(size) {
		return Array{}, fmt.Errorf("%w: %d data bytes for shape %v of %s (want %d)", ErrFormat, len(data), shape, d[1], n*int64(size))
	}
	return Array{Descr: d[1], Shape: shape, Data: data}, nil
}

// ReadFile reads and parses a .npy file; errors name the path.
func ReadFile(path string) (Array, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Array{}, err
	}
	a, err := Parse(b)
	if err != nil {
		return Array{}, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// Encode writes a as a version 1.0 .npy file, its header padded to 64
// bytes as NumPy does.
func Encode(a Array) ([]byte, error) {
	size, ok := ItemSize[a.Descr]
	if !ok {
		return nil, fmt.Errorf("%w: dtype %q", ErrFormat, a.Descr)
	}
	if int64(len(a.Data)) != a.Len()*int64(size) {
		return nil, fmt.Errorf("%w: %d data bytes for shape %v of %s", ErrFormat, len(a.Data), a.Shape, a.Descr)
	}
	dims := make([]string, len(a.Shape))
	for i, d := range a.Shape {
		dims[i] = strconv.FormatInt(d, 10)
	}
	shape := strings.Join(dims, ", ")
	if len(dims) == 1 {
		shape += ","
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", a.Descr, shape)
	pad := 64 - (10+len(hdr)+1)%64
	hdr += strings.Repeat(" ", pad%64) + "\n"
	if len(hdr) > math.MaxUint16 {
		return nil, fmt.Errorf("%w: header of %d bytes", ErrFormat, len(hdr))
	}
	out := make([]byte, 10, 10+len(hdr)+len(a.Data))
	copy(out, "\x93NUMPY\x01\x00")
	binary.LittleEndian.PutUint16(out[8:], uint16(len(hdr)))
	out = append(out, hdr...)
	return append(out, a.Data...), nil
}

// EncodeFloat32 writes float32 values of the given shape as a '<f4' .npy.
// It panics if len(v) does not match the shape (a programming error).
func EncodeFloat32(shape []int64, v []float32) []byte {
	data := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(f))
	}
	b, err := Encode(Array{Descr: "<f4", Shape: shape, Data: data})
	if err != nil {
		panic(err)
	}
	return b
}
