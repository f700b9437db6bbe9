package ort

import "errors"

// The protobuf wire format, as much of it as reading an ONNX model's
// metadata, inputs and opsets needs (modelinfo.go).

type (
	wireNumber int32
	wireType   int8
)

const (
	varintType  wireType = 0
	fixed64Type wireType = 1
	bytesType   wireType = 2
	fixed32Type wireType = 5
)

var errWire = errors.New("malformed protobuf")

// consumeVarint reads a base-128 varint; n < 0 on a truncated or
// over-long one.
func consumeVarint(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, -1
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}

// consumeBytes reads a length-delimited field's bytes.
func consumeBytes(b []byte) ([]byte, int) {
	l, n := consumeVarint(b)
	if n < 0 || l > uint64(len(b)-n) {
		return nil, -1
	}
	return b[n : n+int(l)], n + int(l)
}
