package quant

import (
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// sameFrom9To13 are the operators whose meaning did not change from opset
// 9 to 13 for the attributes an opset-9 model can carry (later versions
// added types, or attributes whose defaults are the old behaviour).
var sameFrom9To13 = []string{
	"Abs", "Add", "AveragePool", "BatchNormalization", "Cast", "Concat", "Conv", "ConvTranspose",
	"Div", "Erf", "Exp", "Flatten", "Gather", "Gemm", "GlobalAveragePool", "GlobalMaxPool",
	"HardSigmoid", "Identity", "LeakyRelu", "Log", "MatMul", "MaxPool", "Mul", "Neg", "Pow",
	"PRelu", "ReduceMax", "ReduceMean", "ReduceMin", "Relu", "Reshape", "Shape", "Sigmoid",
	"Sqrt", "Sub", "Tanh", "Transpose",
}

// rewrittenTo13 are the operators upgradeOpset rewrites into their opset-13
// form: Slice (starts, ends, axes become inputs at 10), Clip (min and max
// at 11), Squeeze and Unsqueeze (axes at 13), Softmax, LogSoftmax and
// Hardmax (from "flatten to 2-D at axis" to "along axis" at 13: rewritten
// as Flatten, the operator along the last axis, and a Reshape back, which
// computes exactly what the old form did at any rank).
var rewrittenTo13 = []string{"Slice", "Clip", "Squeeze", "Unsqueeze", "Softmax", "LogSoftmax", "Hardmax"}

// upgradeOpset lifts an opset-9 model (no QuantizeLinear) to opset 13, where
// QuantizeLinear takes per-channel weights, when it can do so without
// changing what the model computes: every operator is one of sameFrom9To13
// or rewrittenTo13, and the latter are rewritten. paddle2onnx exports
// PaddleOCR's v4 recogniser at opset 9; with per-tensor weights (opset 10)
// its int8 form read nothing. It returns a note saying what it did ("" when
// it did nothing: the model is opset 13 or newer, or uses an operator
// outside both lists).
func (q *QDQModel) upgradeOpset() string {
	from := q.opset()
	if from != 9 { // 10–12 take QDQ as they are (perChannelOK)
		return ""
	}
	g := q.m.GetGraph()
	for _, n := range g.GetNode() {
		if n.GetDomain() == "" && !slices.Contains(sameFrom9To13, n.GetOpType()) && !slices.Contains(rewrittenTo13, n.GetOpType()) {
			return ""
		}
	}
	count := map[string]int{}
	var nodes []*onnx.NodeProto
	for i, n := range g.GetNode() {
		base := fmt.Sprintf("%s_opset13_%d", n.GetName(), i)
		addInit := func(suffix string, t *onnx.TensorProto) string {
			t.Name = proto.String(base + "_" + suffix)
			g.Initializer = append(g.Initializer, t)
			q.inits[t.GetName()] = t
			return t.GetName()
		}
		ints := func(v []int64) *onnx.TensorProto {
			return &onnx.TensorProto{DataType: proto.Int32(int32(onnx.TensorProto_INT64)), Dims: []int64{int64(len(v))}, Int64Data: slices.Clone(v)}
		}
		op := n.GetOpType()
		switch {
		case n.GetDomain() != "":
		case op == "Slice" && len(n.GetInput()) == 1:
			starts, ends, axes := intsAttr(n, "starts"), intsAttr(n, "ends"), intsAttr(n, "axes")
			if axes == nil {
				for d := range starts {
					axes = append(axes, int64(d))
				}
			}
			n.Input = append(n.Input, addInit("starts", ints(starts)), addInit("ends", ints(ends)), addInit("axes", ints(axes)))
			n.Attribute = nil
			count[op]++
		case op == "Clip" && len(n.GetInput()) == 1:
			lo, hi := onnx.FloatAttr(n, "min", -math.MaxFloat32), onnx.FloatAttr(n, "max", math.MaxFloat32)
			scalar := func(v float32) *onnx.TensorProto {
				return &onnx.TensorProto{DataType: proto.Int32(int32(onnx.TensorProto_FLOAT)), FloatData: []float32{v}}
			}
			n.Input = append(n.Input, addInit("min", scalar(lo)), addInit("max", scalar(hi)))
			n.Attribute = nil
			count[op]++
		case (op == "Squeeze" || op == "Unsqueeze") && len(n.GetInput()) == 1:
			if axes := intsAttr(n, "axes"); axes != nil {
				n.Input = append(n.Input, addInit("axes", ints(axes)))
			}
			onnx.RemoveAttr(n, "axes")
			count[op]++
		case op == "Softmax" || op == "LogSoftmax" || op == "Hardmax":
			axis := onnx.IntAttr(n, "axis", 1)
			x, y := n.GetInput()[0], n.GetOutput()[0]
			shape, flat, along := base+"_shape", base+"_2d", base+"_2d_out"
			nodes = append(nodes,
				&onnx.NodeProto{Name: proto.String(base + "_Shape"), OpType: proto.String("Shape"), Input: []string{x}, Output: []string{shape}},
				&onnx.NodeProto{Name: proto.String(base + "_Flatten"), OpType: proto.String("Flatten"), Input: []string{x}, Output: []string{flat},
					Attribute: []*onnx.AttributeProto{onnx.AttrInt("axis", axis)}},
				&onnx.NodeProto{Name: n.Name, OpType: n.OpType, Input: []string{flat}, Output: []string{along},
					Attribute: []*onnx.AttributeProto{onnx.AttrInt("axis", -1)}},
				&onnx.NodeProto{Name: proto.String(base + "_Reshape"), OpType: proto.String("Reshape"), Input: []string{along, shape}, Output: []string{y}})
			count[op]++
			continue
		}
		nodes = append(nodes, n)
	}
	g.Node = nodes
	for _, o := range q.m.GetOpsetImport() {
		if o.GetDomain() == "" || o.GetDomain() == "ai.onnx" {
			o.Version = proto.Int64(13)
		}
	}
	var done []string
	for _, op := range rewrittenTo13 {
		if count[op] > 0 {
			done = append(done, fmt.Sprintf("%d %s", count[op], op))
		}
	}
	return fmt.Sprintf("opset %d relabelled 13 (per-channel weights; rewritten to their opset-13 form: %v)", from, done)
}

// intsAttr is n's integer-list attribute name, nil when absent.
func intsAttr(n *onnx.NodeProto, name string) []int64 {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name {
			return a.GetInts()
		}
	}
	return nil
}
