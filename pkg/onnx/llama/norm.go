package llama

import (
	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// The RMSNorm in front of each projection. Every norm of the decoder feeds
// exactly one projection: a layer's input norm the q/k/v projection, its
// post-attention norm the gate/up one, the final norm the LM head. On the
// kernel each pair is one ai.edgeinfer.MatMulNBits node: input 4 is the
// norm's weight, input 5 the residual (skip) it adds first, output 1 that
// sum, attribute epsilon the norm's (runtime/ort's matmul_q4.c normalises
// each row as it quantises it for the product). At batch 1 the norm nodes
// cost ONNX Runtime a dispatch each for a few microseconds of arithmetic
// (quant's TestProfileDecodeAndPrefill lists them). The portable graph
// keeps SimplifiedLayerNormalization and
// com.microsoft.SkipSimplifiedLayerNormalization.
const (
	normWeightInput = 4
	normSkipInput   = 5
)

// fuseNorm folds each SimplifiedLayerNormalization or
// SkipSimplifiedLayerNormalization whose normalised output feeds only one
// kernel MatMulNBits (and is no graph output) into that node, at the
// norm's place in the graph. It returns the nodes fused.
func fuseNorm(g *onnx.GraphProto) int {
	users := map[string]int{}
	producer := map[string]int{}
	for i, n := range g.GetNode() {
		for _, in := range n.GetInput() {
			users[in]++
		}
		for _, out := range n.GetOutput() {
			producer[out] = i
		}
	}
	for _, o := range g.GetOutput() {
		users[o.GetName()]++ // a graph output is never fused away
	}
	nodes := g.GetNode()
	into := map[int]*onnx.NodeProto{} // norm position → the fused node
	gone := map[int]bool{}            // the projections moved to their norm
	for i, mm := range nodes {
		if mm.GetOpType() != "MatMulNBits" || mm.GetDomain() != onnx.DomainEdgeInfer || len(mm.GetOutput()) != 1 ||
			len(mm.GetInput()) < 3 || !emptyFrom(mm.GetInput(), 3) {
			continue
		}
		x := mm.GetInput()[0]
		at, ok := producer[x]
		if !ok || users[x] != 1 || into[at] != nil {
			continue
		}
		norm := nodes[at]
		skip, sum, ok := normParts(norm, users)
		if !ok || norm.GetOutput()[0] != x {
			continue
		}
		// the projection's weights must exist where the norm was
		if p, ok := producer[mm.GetInput()[1]]; ok && p > at {
			continue
		}
		if p, ok := producer[mm.GetInput()[2]]; ok && p > at {
			continue
		}
		in := []string{norm.GetInput()[0], mm.GetInput()[1], mm.GetInput()[2], "", norm.GetInput()[len(norm.GetInput())-1]}
		if skip {
			in = append(in, norm.GetInput()[1])
			if sum == "" {
				sum = mm.GetOutput()[0] + "/sum"
			}
			mm.Output = append(mm.Output, sum)
		}
		mm.Input = in
		mm.Attribute = append(mm.Attribute, onnx.AttrFloat("epsilon", onnx.FloatAttr(norm, "epsilon", 1e-5)))
		into[at], gone[i] = mm, true
	}
	if len(into) == 0 {
		return 0
	}
	kept := make([]*onnx.NodeProto, 0, len(nodes)-len(into))
	for i, n := range nodes {
		switch {
		case into[i] != nil:
			kept = append(kept, into[i])
		case !gone[i]:
			kept = append(kept, n)
		}
	}
	g.Node = kept
	return len(into)
}

// normParts reports whether n is a norm fuseNorm folds — the ONNX-domain
// SimplifiedLayerNormalization over the last axis (x, weight), or
// com.microsoft.SkipSimplifiedLayerNormalization without bias (x, skip,
// weight) — with its statistics outputs unused, and names its sum output
// ("" when absent or unused).
func normParts(n *onnx.NodeProto, users map[string]int) (skip bool, sum string, ok bool) {
	out := n.GetOutput()
	unused := func(from, to int) bool {
		for i := from; i < min(to, len(out)); i++ {
			if out[i] != "" && users[out[i]] > 0 {
				return false
			}
		}
		return true
	}
	switch {
	case n.GetOpType() == "SimplifiedLayerNormalization" && n.GetDomain() == onnx.DomainONNX &&
		len(n.GetInput()) == 2 && onnx.IntAttr(n, "axis", -1) == -1 && onnx.IntAttr(n, "stash_type", 1) == 1:
		return false, "", len(out) >= 1 && unused(1, len(out))
	case n.GetOpType() == "SkipSimplifiedLayerNormalization" && n.GetDomain() == onnx.DomainMicrosoft &&
		len(n.GetInput()) == 3:
		if len(out) < 1 || !unused(1, 3) || len(out) > 4 {
			return false, "", false
		}
		if len(out) == 4 && users[out[3]] > 0 {
			sum = out[3]
		}
		return true, sum, true
	}
	return false, "", false
}

// splitNorm is fuseNorm undone: each MatMulNBits with a norm weight back
// to the norm node and the plain projection after it. It returns the
// nodes split.
func splitNorm(g *onnx.GraphProto) int {
	var nodes []*onnx.NodeProto
	split := 0
	for _, mm := range g.GetNode() {
		in := mm.GetInput()
		if mm.GetOpType() != "MatMulNBits" || len(in) <= normWeightInput || in[normWeightInput] == "" {
			nodes = append(nodes, mm)
			continue
		}
		eps := onnx.AttrFloat("epsilon", onnx.FloatAttr(mm, "epsilon", 1e-5))
		onnx.RemoveAttr(mm, "epsilon")
		normed := mm.GetOutput()[0] + "/normed"
		var norm *onnx.NodeProto
		if len(in) > normSkipInput && in[normSkipInput] != "" {
			sum := ""
			if len(mm.GetOutput()) > 1 {
				sum = mm.GetOutput()[1]
			}
			norm = &onnx.NodeProto{OpType: proto.String("SkipSimplifiedLayerNormalization"), Domain: proto.String(onnx.DomainMicrosoft),
				Input: []string{in[0], in[normSkipInput], in[normWeightInput]}, Output: []string{normed, "", "", sum},
				Name: proto.String(normed), Attribute: []*onnx.AttributeProto{eps}}
		} else {
			norm = &onnx.NodeProto{OpType: proto.String("SimplifiedLayerNormalization"), Domain: proto.String(onnx.DomainONNX),
				Input: []string{in[0], in[normWeightInput]}, Output: []string{normed}, Name: proto.String(normed),
				Attribute: []*onnx.AttributeProto{onnx.AttrInt("axis", -1), eps}}
		}
		mm.Input = []string{normed, in[1], in[2]}
		mm.Output = mm.GetOutput()[:1]
		nodes = append(nodes, norm, mm)
		split++
	}
	g.Node = nodes
	return split
}

// emptyFrom reports whether every name of in from i on is "".
func emptyFrom(in []string, i int) bool {
	for _, s := range in[min(i, len(in)):] {
		if s != "" {
			return false
		}
	}
	return true
}
