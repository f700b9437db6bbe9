package llama

import "github.com/edgeinfer/edgeinfer/pkg/onnx"

// attrSwiGLU marks an ai.edgeinfer.MatMulNBits node whose B stacks an MLP's
// gate and up projections and whose output is the SwiGLU activation
// silu(gate)·up itself (runtime/ort's matmul_q4.c computes it as it stores
// each group of outputs). The portable graph spells the same as MatMulNBits,
// Split, Sigmoid, Mul, Mul; at batch 1 those three nodes per layer cost ONNX
// Runtime more in dispatch than their arithmetic (quant's
// TestProfileDecodeAndPrefill lists them), so the kernel graph has one node.
const attrSwiGLU = "swiglu"

// fuseSwiGLU turns each kernel MatMulNBits → Split in two halves →
// Mul(Mul(gate, Sigmoid(gate)), up) into the one node, where no
// intermediate value is used elsewhere. It returns the nodes fused.
func fuseSwiGLU(g *onnx.GraphProto) int {
	users := map[string][]*onnx.NodeProto{}
	for _, n := range g.GetNode() {
		for _, in := range n.GetInput() {
			users[in] = append(users[in], n)
		}
	}
	for _, o := range g.GetOutput() {
		users[o.GetName()] = append(users[o.GetName()], nil) // a graph output is never fused away
	}
	only := func(name string, op string) *onnx.NodeProto {
		if u := users[name]; len(u) == 1 && u[0] != nil && u[0].GetOpType() == op && u[0].GetDomain() == onnx.DomainONNX {
			return u[0]
		}
		return nil
	}
	consts := initializers(g)
	removed, sizes := map[*onnx.NodeProto]bool{}, map[string]bool{} // the Splits' size constants, used by nothing else
	fused := 0
	for _, mm := range g.GetNode() {
		n := onnx.IntAttr(mm, "N", 0)
		if mm.GetOpType() != "MatMulNBits" || mm.GetDomain() != onnx.DomainEdgeInfer || onnx.IntAttr(mm, attrSwiGLU, 0) != 0 ||
			n%16 != 0 || len(mm.GetOutput()) != 1 {
			continue
		}
		split := only(mm.GetOutput()[0], "Split")
		if split == nil || len(split.GetInput()) != 2 || len(split.GetOutput()) != 2 || onnx.IntAttr(split, "axis", 0) != -1 ||
			!int64sAre(consts[split.GetInput()[1]], n/2, n/2) {
			continue
		}
		gate, up := split.GetOutput()[0], split.GetOutput()[1]
		// gate feeds a Sigmoid and the Mul that takes the Sigmoid's output
		var sig, silu *onnx.NodeProto
		for _, u := range users[gate] {
			switch {
			case u == nil:
			case u.GetOpType() == "Sigmoid" && sig == nil:
				sig = u
			case u.GetOpType() == "Mul" && silu == nil:
				silu = u
			}
		}
		if len(users[gate]) != 2 || sig == nil || silu == nil || only(sig.GetOutput()[0], "Mul") != silu ||
			!sameInputs(silu, gate, sig.GetOutput()[0]) {
			continue
		}
		act := only(silu.GetOutput()[0], "Mul")
		if act == nil || only(up, "Mul") != act || !sameInputs(act, silu.GetOutput()[0], up) {
			continue
		}
		mm.Output[0] = act.GetOutput()[0]
		mm.Attribute = append(mm.Attribute, onnx.AttrInt(attrSwiGLU, 1))
		for _, r := range []*onnx.NodeProto{split, sig, silu, act} {
			removed[r] = true
		}
		if len(users[split.GetInput()[1]]) == 1 {
			sizes[split.GetInput()[1]] = true
		}
		fused++
	}
	if fused > 0 {
		kept := g.Node[:0]
		for _, n := range g.GetNode() {
			if !removed[n] {
				kept = append(kept, n)
			}
		}
		g.Node = kept
		inits := g.Initializer[:0]
		for _, t := range g.GetInitializer() {
			if !sizes[t.GetName()] {
				inits = append(inits, t)
			}
		}
		g.Initializer = inits
	}
	return fused
}

// splitSwiGLU is fuseSwiGLU undone: each swiglu node back to MatMulNBits
// and the standard Split, Sigmoid, Mul, Mul after it. It returns the nodes
// split.
func splitSwiGLU(g *onnx.GraphProto) int {
	var nodes []*onnx.NodeProto
	split := 0
	for _, mm := range g.GetNode() {
		nodes = append(nodes, mm)
		if mm.GetOpType() != "MatMulNBits" || onnx.IntAttr(mm, attrSwiGLU, 0) == 0 {
			continue
		}
		onnx.RemoveAttr(mm, attrSwiGLU)
		out := mm.GetOutput()[0]
		stacked, sizes, gate, up, sig, silu := out+"/gate_up", out+"/split_sizes", out+"/gate", out+"/up", out+"/sigmoid", out+"/silu"
		mm.Output[0] = stacked
		half := onnx.IntAttr(mm, "N", 0) / 2
		s := onnxNode("Split", []string{stacked, addInt64s(g, sizes, half, half)}, gate, onnx.AttrInt("axis", -1))
		s.Output = append(s.Output, up)
		nodes = append(nodes, s, onnxNode("Sigmoid", []string{gate}, sig), onnxNode("Mul", []string{gate, sig}, silu),
			onnxNode("Mul", []string{silu, up}, out))
		split++
	}
	g.Node = nodes
	return split
}

// sameInputs reports whether n's two inputs are a and b in either order.
func sameInputs(n *onnx.NodeProto, a, b string) bool {
	in := n.GetInput()
	return len(in) == 2 && ((in[0] == a && in[1] == b) || (in[0] == b && in[1] == a))
}
