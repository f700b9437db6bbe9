package ort

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// ValueInfo describes one graph input or output.
type ValueInfo struct {
	Name string
	// Kind is "tensor", "sequence", "map", "optional", "sparse_tensor" or
	// "unknown". Only tensors can be fed by this package.
	Kind string
	// DType is the element type of a tensor (Undefined for other kinds).
	DType DType
	// Shape has one entry per dimension: the size, or -1 where the
	// dimension is symbolic or unknown. Nil when the rank is unknown.
	Shape []int64
	// DimNames has the symbolic name of each dimension ("batch",
	// "sequence_length"), "" for fixed or anonymous ones; nil if none
	// is named.
	DimNames []string
}

// String renders the value as `name: float32[batch,3,224,224]`.
func (v ValueInfo) String() string {
	if v.Kind != "tensor" {
		return v.Name + ": " + v.Kind
	}
	return v.Name + ": " + v.DType.String() + FormatShape(v.Shape, v.DimNames)
}

// FormatShape renders a shape with symbolic names where known: [batch,3,?].
func FormatShape(shape []int64, names []string) string {
	if shape == nil {
		return "[?rank]"
	}
	parts := make([]string, len(shape))
	for i, d := range shape {
		switch {
		case i < len(names) && names[i] != "":
			parts[i] = names[i]
		case d < 0:
			parts[i] = "?"
		default:
			parts[i] = strconv.FormatInt(d, 10)
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Static reports whether every dimension has a fixed size.
func (v ValueInfo) Static() bool {
	if v.Shape == nil {
		return false
	}
	for _, d := range v.Shape {
		if d < 0 {
			return false
		}
	}
	return true
}

// Opset is one operator-set import of a model.
type Opset struct {
	Domain  string // "" is the default ONNX domain, "ai.onnx"
	Version int64
}

// ModelInfo is what a model declares about itself.
type ModelInfo struct {
	IRVersion       int64
	Producer        string
	ProducerVersion string
	Domain          string
	ModelVersion    int64
	Description     string
	GraphName       string
	Opsets          []Opset
	Metadata        map[string]string
	Inputs          []ValueInfo
	Outputs         []ValueInfo
}

// ReadModelInfo reads a serialised ONNX ModelProto's header: opsets,
// producer, metadata, and the graph's inputs and outputs with element types
// and (symbolic) shapes — what a Session reports as Info and what a caller
// needs to feed it. It is pure Go, reading the protobuf wire format field
// by field (no generated ONNX types), needs no ONNX Runtime library, and
// skips weights without copying them. Graph inputs that are initializers
// (models of IR version < 4 list them) are left out, as ONNX Runtime does.
//
// Offline tools that want the whole model described (initializers,
// parameter counts, operator histogram) use pkg/onnx's Inspect, which
// decodes the full protobuf.
func ReadModelInfo(model []byte) (ModelInfo, error) {
	var info ModelInfo
	var graph []byte
	err := walk(model, func(num wireNumber, typ wireType, v uint64, b []byte) error {
		switch num {
		case 1:
			info.IRVersion = int64(v)
		case 2:
			info.Producer = string(b)
		case 3:
			info.ProducerVersion = string(b)
		case 4:
			info.Domain = string(b)
		case 5:
			info.ModelVersion = int64(v)
		case 6:
			info.Description = string(b)
		case 7:
			graph = b
		case 8:
			var op Opset
			if err := walk(b, func(n wireNumber, _ wireType, v uint64, b []byte) error {
				switch n {
				case 1:
					op.Domain = string(b)
				case 2:
					op.Version = int64(v)
				}
				return nil
			}); err != nil {
				return fmt.Errorf("opset_import: %w", err)
			}
			info.Opsets = append(info.Opsets, op)
		case 14:
			var k, val string
			if err := walk(b, func(n wireNumber, _ wireType, _ uint64, b []byte) error {
				switch n {
				case 1:
					k = string(b)
				case 2:
					val = string(b)
				}
				return nil
			}); err != nil {
				return fmt.Errorf("metadata_props: %w", err)
			}
			if info.Metadata == nil {
				info.Metadata = map[string]string{}
			}
			info.Metadata[k] = val
		}
		return nil
	})
	if err != nil {
		return ModelInfo{}, fmt.Errorf("%w: %v", ErrInvalidModel, err)
	}
	if graph == nil {
		return ModelInfo{}, fmt.Errorf("%w: no graph", ErrInvalidModel)
	}
	var inputs, outputs []ValueInfo
	initializers := map[string]bool{}
	err = walk(graph, func(num wireNumber, _ wireType, _ uint64, b []byte) error {
		switch num {
		case 2:
			info.GraphName = string(b)
		case 5:
			return walk(b, func(n wireNumber, _ wireType, _ uint64, b []byte) error {
				if n == 8 {
					initializers[string(b)] = true
				}
				return nil
			})
		case 11, 12:
			vi, err := parseValueInfo(b)
			if err != nil {
				return err
			}
			if num == 11 {
				inputs = append(inputs, vi)
			} else {
				outputs = append(outputs, vi)
			}
		}
		return nil
	})
	if err != nil {
		return ModelInfo{}, fmt.Errorf("%w: graph: %v", ErrInvalidModel, err)
	}
	for _, in := range inputs {
		if !initializers[in.Name] {
			info.Inputs = append(info.Inputs, in)
		}
	}
	info.Outputs = outputs
	return info, nil
}

func parseValueInfo(b []byte) (ValueInfo, error) {
	vi := ValueInfo{Kind: "unknown"}
	err := walk(b, func(n wireNumber, _ wireType, _ uint64, b []byte) error {
		switch n {
		case 1:
			vi.Name = string(b)
		case 2:
			return parseType(b, &vi)
		}
		return nil
	})
	return vi, err
}

// parseType reads a TypeProto: tensor_type (1), sequence_type (4),
// map_type (5), sparse_tensor_type (8), optional_type (9).
func parseType(b []byte, vi *ValueInfo) error {
	return walk(b, func(n wireNumber, _ wireType, _ uint64, b []byte) error {
		switch n {
		case 1, 8:
			vi.Kind = "tensor"
			if n == 8 {
				vi.Kind = "sparse_tensor"
			}
			return walk(b, func(n wireNumber, _ wireType, v uint64, b []byte) error {
				switch n {
				case 1:
					vi.DType = DType(v)
				case 2:
					return parseShape(b, vi)
				}
				return nil
			})
		case 4:
			vi.Kind = "sequence"
		case 5:
			vi.Kind = "map"
		case 9:
			vi.Kind = "optional"
		}
		return nil
	})
}

func parseShape(b []byte, vi *ValueInfo) error {
	vi.Shape = []int64{}
	named := false
	var names []string
	err := walk(b, func(n wireNumber, _ wireType, _ uint64, b []byte) error {
		if n != 1 {
			return nil
		}
		size, name := int64(-1), ""
		if err := walk(b, func(n wireNumber, _ wireType, v uint64, b []byte) error {
			switch n {
			case 1:
				size = int64(v)
			case 2:
				name = string(b)
			}
			return nil
		}); err != nil {
			return err
		}
		vi.Shape = append(vi.Shape, size)
		names = append(names, name)
		named = named || name != ""
		return nil
	})
	if named {
		vi.DimNames = names
	}
	return err
}

// walk calls fn for each field of a protobuf message: v holds varint and
// fixed values, b the bytes of length-delimited ones (aliasing msg). The
// wire format is read by hand (wire.go) so that the runtime does not link
// the protobuf module for the few fields it reads.
func walk(msg []byte, fn func(num wireNumber, typ wireType, v uint64, b []byte) error) error {
	for len(msg) > 0 {
		tag, n := consumeVarint(msg)
		if n < 0 {
			return errWire
		}
		num, typ := wireNumber(tag>>3), wireType(tag&7)
		if num <= 0 {
			return fmt.Errorf("field number %d: %w", num, errWire)
		}
		msg = msg[n:]
		var v uint64
		var b []byte
		switch typ {
		case varintType:
			v, n = consumeVarint(msg)
		case fixed32Type:
			if n = 4; len(msg) < 4 {
				n = -1
			} else {
				v = uint64(binary.LittleEndian.Uint32(msg))
			}
		case fixed64Type:
			if n = 8; len(msg) < 8 {
				n = -1
			} else {
				v = binary.LittleEndian.Uint64(msg)
			}
		case bytesType:
			b, n = consumeBytes(msg)
		default: // groups are not used by ONNX
			n = -1
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, errWire)
		}
		msg = msg[n:]
		if err := fn(num, typ, v, b); err != nil {
			return err
		}
	}
	return nil
}
