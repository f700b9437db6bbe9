package ort

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// parseTensorProto decodes an ONNX TensorProto (the test data format of
// the ONNX backend tests) into element type, dims and little-endian raw
// bytes.
func parseTensorProto(b []byte) (DType, []int64, []byte, error) {
	var (
		dt        DType
		dims      []int64
		raw       []byte
		hasRaw    bool
		ints      []uint64 // int32_data, int64_data, uint64_data (varints)
		fixed32s  []uint32 // float_data
		fixed64s  []uint64 // double_data
		hasString bool
		external  bool
	)
	err := walk(b, func(num wireNumber, typ wireType, v uint64, val []byte) error {
		switch num {
		case 1:
			return eachVarint(typ, v, val, func(x uint64) { dims = append(dims, int64(x)) })
		case 2:
			dt = DType(v)
		case 4:
			return eachFixed32(typ, v, val, func(x uint32) { fixed32s = append(fixed32s, x) })
		case 5, 7, 11:
			return eachVarint(typ, v, val, func(x uint64) { ints = append(ints, x) })
		case 6:
			hasString = true
		case 9:
			raw, hasRaw = val, true
		case 10:
			return eachFixed64(typ, v, val, func(x uint64) { fixed64s = append(fixed64s, x) })
		case 13, 14:
			external = external || num == 13 || v == 1
		}
		return nil
	})
	if err != nil {
		return 0, nil, nil, err
	}
	if hasString || dt == String {
		return dt, dims, nil, fmt.Errorf("string tensor")
	}
	if external {
		return dt, dims, nil, fmt.Errorf("external data")
	}
	size := dt.Size()
	if size == 0 {
		return dt, dims, nil, fmt.Errorf("unsupported element type %s", dt)
	}
	n, err := elementCount(dims)
	if err != nil {
		return dt, dims, nil, err
	}
	if hasRaw {
		if len(raw) != int(n)*size {
			return dt, dims, nil, fmt.Errorf("raw_data has %d bytes, want %d", len(raw), int(n)*size)
		}
		return dt, dims, raw, nil
	}
	out := make([]byte, int(n)*size)
	switch {
	case len(fixed32s) > 0:
		if len(fixed32s) != int(n) || size != 4 {
			return dt, dims, nil, fmt.Errorf("float_data has %d values, want %d", len(fixed32s), n)
		}
		for i, x := range fixed32s {
			binary.LittleEndian.PutUint32(out[4*i:], x)
		}
	case len(fixed64s) > 0:
		if len(fixed64s) != int(n) || size != 8 {
			return dt, dims, nil, fmt.Errorf("double_data has %d values, want %d", len(fixed64s), n)
		}
		for i, x := range fixed64s {
			binary.LittleEndian.PutUint64(out[8*i:], x)
		}
	default:
		if dt == 14 || dt == 15 {
			return dt, dims, nil, fmt.Errorf("complex data not supported")
		}
		if len(ints) != int(n) {
			return dt, dims, nil, fmt.Errorf("integer data has %d values, want %d", len(ints), n)
		}
		for i, x := range ints {
			switch size {
			case 1:
				out[i] = byte(x)
			case 2:
				binary.LittleEndian.PutUint16(out[2*i:], uint16(x))
			case 4:
				binary.LittleEndian.PutUint32(out[4*i:], uint32(x))
			case 8:
				binary.LittleEndian.PutUint64(out[8*i:], x)
			}
		}
	}
	return dt, dims, out, nil
}

func eachVarint(typ wireType, v uint64, packed []byte, fn func(uint64)) error {
	if typ == varintType {
		fn(v)
		return nil
	}
	for len(packed) > 0 {
		x, n := protowire.ConsumeVarint(packed)
		if n < 0 {
			return protowire.ParseError(n)
		}
		fn(x)
		packed = packed[n:]
	}
	return nil
}

func eachFixed32(typ wireType, v uint64, packed []byte, fn func(uint32)) error {
	if typ == fixed32Type {
		fn(uint32(v))
		return nil
	}
	for len(packed) > 0 {
		x, n := protowire.ConsumeFixed32(packed)
		if n < 0 {
			return protowire.ParseError(n)
		}
		fn(x)
		packed = packed[n:]
	}
	return nil
}

func eachFixed64(typ wireType, v uint64, packed []byte, fn func(uint64)) error {
	if typ == fixed64Type {
		fn(v)
		return nil
	}
	for len(packed) > 0 {
		x, n := protowire.ConsumeFixed64(packed)
		if n < 0 {
			return protowire.ParseError(n)
		}
		fn(x)
		packed = packed[n:]
	}
	return nil
}
