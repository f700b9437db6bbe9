package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// errNpy reports a malformed or unsupported .npy file.
var errNpy = errors.New("npy: unsupported or malformed file")

var (
	npyDescr   = regexp.MustCompile(`'descr'\s*:\s*'([^']*)'`)
	npyFortran = regexp.MustCompile(`'fortran_order'\s*:\s*(True|False)`)
	npyShape   = regexp.MustCompile(`'shape'\s*:\s*\(([^)]*)\)`)
)

// maxNpyElems bounds a calibration tensor (1 Gi values) so a hostile
// header cannot ask for more.
const maxNpyElems = 1 << 30

// ParseNpy decodes a NumPy .npy file (format 1.0–3.0) holding little-endian
// float32 ('<f4') in C order.
func ParseNpy(raw []byte) (Tensor, error) {
	if len(raw) < 10 || string(raw[:6]) != "\x93NUMPY" {
		return Tensor{}, fmt.Errorf("%w: no NUMPY magic", errNpy)
	}
	var hlen, off int
	switch raw[6] {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(raw[8:])), 10
	case 2, 3:
		if len(raw) < 12 {
			return Tensor{}, fmt.Errorf("%w: short header", errNpy)
		}
		hlen, off = int(binary.LittleEndian.Uint32(raw[8:])), 12
	default:
		return Tensor{}, fmt.Errorf("%w: version %d", errNpy, raw[6])
	}
	if hlen < 0 || off+hlen > len(raw) {
		return Tensor{}, fmt.Errorf("%w: header length %d", errNpy, hlen)
	}
	hdr := string(raw[off : off+hlen])
	body := raw[off+hlen:]
	d := npyDescr.FindStringSubmatch(hdr)
	if d == nil || (d[1] != "<f4" && d[1] != "float32") {
		return Tensor{}, fmt.Errorf("%w: dtype %v (want '<f4' float32)", errNpy, d)
	}
	if f := npyFortran.FindStringSubmatch(hdr); f == nil || f[1] != "False" {
		return Tensor{}, fmt.Errorf("%w: fortran order", errNpy)
	}
	m := npyShape.FindStringSubmatch(hdr)
	if m == nil {
		return Tensor{}, fmt.Errorf("%w: no shape", errNpy)
	}
	shape := []int64{}
	n := int64(1)
	for _, p := range strings.Split(m[1], ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || v < 0 || v > maxNpyElems {
			return Tensor{}, fmt.Errorf("%w: shape %q", errNpy, m[1])
		}
		shape = append(shape, v)
		if n *= v; n > maxNpyElems {
			return Tensor{}, fmt.Errorf("%w: shape %q too large", errNpy, m[1])
		}
	}
	if int64(len(body)) != 4*n {
		return Tensor{}, fmt.Errorf("%w: %d data bytes for shape %v", errNpy, len(body), shape)
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:]))
	}
	return Tensor{Shape: shape, Data: data}, nil
}

// EncodeNpy writes t as a version 1.0 .npy ('<f4', C order).
func EncodeNpy(t Tensor) []byte {
	dims := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = strconv.FormatInt(d, 10)
	}
	shape := strings.Join(dims, ", ")
	if len(dims) == 1 {
		shape += ","
	}
	hdr := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shape)
	// The header plus its 10-byte prefix is padded to 64 bytes, ending in \n.
	pad := 64 - (10+len(hdr)+1)%64
	hdr += strings.Repeat(" ", pad%64) + "\n"
	out := make([]byte, 10, 10+len(hdr)+4*len(t.Data))
	copy(out, "\x93NUMPY\x01\x00")
	binary.LittleEndian.PutUint16(out[8:], uint16(len(hdr)))
	out = append(out, hdr...)
	return append(out, float32Bytes(t.Data)...)
}

func loadNpyFile(path string) (Tensor, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Tensor{}, err
	}
	return ParseNpy(raw)
}
