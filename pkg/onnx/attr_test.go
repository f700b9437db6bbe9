package onnx

import "testing"

func TestAttrGetters(t *testing.T) {
	n := &NodeProto{Attribute: []*AttributeProto{AttrInt("axis", -1), AttrFloat("epsilon", 1e-6), AttrInt("bits", 4)}}
	if got := IntAttr(n, "axis", 0); got != -1 {
		t.Errorf("IntAttr(axis) = %d, want -1", got)
	}
	if got := IntAttr(n, "missing", 7); got != 7 {
		t.Errorf("IntAttr(missing) = %d, want the default 7", got)
	}
	if got := FloatAttr(n, "epsilon", 1e-5); got != 1e-6 {
		t.Errorf("FloatAttr(epsilon) = %g, want 1e-6", got)
	}
	RemoveAttr(n, "epsilon")
	if got := FloatAttr(n, "epsilon", 1e-5); got != 1e-5 || len(n.GetAttribute()) != 2 || IntAttr(n, "bits", 0) != 4 {
		t.Errorf("after RemoveAttr(epsilon): %v", n.GetAttribute())
	}
}
