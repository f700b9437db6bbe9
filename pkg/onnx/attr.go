package onnx

import "google.golang.org/protobuf/proto"

// AttrInt returns an integer attribute.
func AttrInt(name string, v int64) *AttributeProto {
	return &AttributeProto{Name: proto.String(name), Type: AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// AttrFloat returns a float attribute.
func AttrFloat(name string, v float32) *AttributeProto {
	return &AttributeProto{Name: proto.String(name), Type: AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

// AttrString returns a string attribute.
func AttrString(name, v string) *AttributeProto {
	return &AttributeProto{Name: proto.String(name), Type: AttributeProto_STRING.Enum(), S: []byte(v)}
}

// AttrInts returns an integer-list attribute.
func AttrInts(name string, v ...int64) *AttributeProto {
	return &AttributeProto{Name: proto.String(name), Type: AttributeProto_INTS.Enum(), Ints: v}
}

// AttrFloats returns a float-list attribute.
func AttrFloats(name string, v ...float32) *AttributeProto {
	return &AttributeProto{Name: proto.String(name), Type: AttributeProto_FLOATS.Enum(), Floats: v}
}

// AttrTensor returns a tensor attribute (for Constant and
// ConstantOfShape's value).
func AttrTensor(name string, t *TensorProto) *AttributeProto {
	return &AttributeProto{Name: proto.String(name), Type: AttributeProto_TENSOR.Enum(), T: t}
}

// AttrGraph returns a graph attribute (If/Loop bodies).
func AttrGraph(name string, g *GraphProto) *AttributeProto {
	return &AttributeProto{Name: proto.String(name), Type: AttributeProto_GRAPH.Enum(), G: g}
}

// IntAttr is n's integer attribute name, def when n has none.
func IntAttr(n *NodeProto, name string, def int64) int64 {
	if a := findAttr(n, name); a != nil {
		return a.GetI()
	}
	return def
}

// FloatAttr is n's float attribute name, def when n has none.
func FloatAttr(n *NodeProto, name string, def float32) float32 {
	if a := findAttr(n, name); a != nil {
		return a.GetF()
	}
	return def
}

// RemoveAttr drops n's attribute name, if any.
func RemoveAttr(n *NodeProto, name string) {
	kept := n.Attribute[:0]
	for _, a := range n.GetAttribute() {
		if a.GetName() != name {
			kept = append(kept, a)
		}
	}
	n.Attribute = kept
}

func findAttr(n *NodeProto, name string) *AttributeProto {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}
