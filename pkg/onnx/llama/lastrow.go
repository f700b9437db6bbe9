package llama

import (
	"slices"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// The head's last rows on the kernel. A paged graph returns the logits of
// one position a sequence (last_index), which head() takes with ONNX
// operators: the last layer's residual Add, then Unsqueeze, Expand,
// GatherElements and Reshape of the rows, five nodes in front of the
// head's product. At batch 1 each costs ONNX Runtime a dispatch for a few
// hundred bytes of work, as the norms did (norm.go). On the kernel the
// head's MatMulNBits takes A and the residual as A and skip (inputs 0 and
// 5) and last_index as its input 6, and picks and adds the rows itself
// (runtime/ort's ops.c, last_rows): the same additions, so the same logits
// bit for bit (TestLastRowsFused).
const lastIndexInput = 6

// fuseLastRow folds the five nodes in front of the kernel head that
// computes the graph's logits into it. It reports whether it did: not
// where the pattern is not head()'s (the rows normalised before they are
// picked, as with hidden_states, or logits for every position).
func fuseLastRow(g *onnx.GraphProto) bool {
	nodes := g.GetNode()
	producer := map[string]int{}
	users := map[string]int{}
	for i, n := range nodes {
		for _, in := range n.GetInput() {
			users[in]++
		}
		for _, out := range n.GetOutput() {
			producer[out] = i
		}
	}
	for _, o := range g.GetOutput() {
		users[o.GetName()]++
	}
	consts := initializers(g)
	// from's node, the one producer of name, when it is op with only the
	// one user
	from := func(name, op string) (int, *onnx.NodeProto) {
		i, ok := producer[name]
		if !ok || users[name] != 1 || nodes[i].GetOpType() != op || nodes[i].GetDomain() != onnx.DomainONNX {
			return -1, nil
		}
		return i, nodes[i]
	}
	for _, head := range nodes {
		in := head.GetInput()
		if head.GetOpType() != "MatMulNBits" || head.GetDomain() != onnx.DomainEdgeInfer || len(head.GetOutput()) > 1 && head.GetOutput()[1] != "" ||
			len(in) <= normWeightInput || in[normWeightInput] == "" || !emptyFrom(in, normSkipInput) || onnx.IntAttr(head, attrSwiGLU, 0) != 0 {
			continue
		}
		ri, reshape := from(in[0], "Reshape")
		if reshape == nil || len(reshape.GetInput()) != 2 || !int64sAre(consts[reshape.GetInput()[1]], -1, onnx.IntAttr(head, "K", 0)) {
			continue
		}
		gi, gather := from(reshape.GetInput()[0], "GatherElements")
		if gather == nil || len(gather.GetInput()) != 2 || onnx.IntAttr(gather, "axis", 0) != 1 {
			continue
		}
		ei, expand := from(gather.GetInput()[1], "Expand")
		if expand == nil || len(expand.GetInput()) != 2 || !int64sAre(consts[expand.GetInput()[1]], 1, 1, onnx.IntAttr(head, "K", 0)) {
			continue
		}
		ui, unsq := from(expand.GetInput()[0], "Unsqueeze")
		if unsq == nil || len(unsq.GetInput()) != 2 || unsq.GetInput()[0] != "last_index" || !int64sAre(consts[unsq.GetInput()[1]], 1, 2) {
			continue
		}
		ai, add := from(gather.GetInput()[0], "Add")
		if add == nil || len(add.GetInput()) != 2 {
			continue
		}
		head.Input = []string{add.GetInput()[0], in[1], in[2], "", in[normWeightInput], add.GetInput()[1], "last_index"}
		gone := []int{ri, gi, ei, ui, ai}
		kept := nodes[:0]
		for i, n := range nodes {
			if !slices.Contains(gone, i) {
				kept = append(kept, n)
			}
		}
		g.Node = kept
		// their constants, now unused (a constant no other node reads)
		for _, n := range []*onnx.NodeProto{reshape, expand, unsq} {
			if c := n.GetInput()[1]; users[c] == 1 {
				g.Initializer = slices.DeleteFunc(g.Initializer, func(t *onnx.TensorProto) bool { return t.GetName() == c })
			}
		}
		return true
	}
	return false
}

// splitLastRow is fuseLastRow undone (before the head leaves the kernel,
// whose input 6 com.microsoft.MatMulNBits has not): the five nodes again
// in front of each MatMulNBits with last_index, their constants named
// after its output. It reports whether there was one.
func splitLastRow(g *onnx.GraphProto) bool {
	var nodes []*onnx.NodeProto
	split := false
	for _, head := range g.GetNode() {
		in := head.GetInput()
		if head.GetOpType() != "MatMulNBits" || len(in) <= lastIndexInput || in[lastIndexInput] == "" || len(head.GetOutput()) == 0 {
			nodes = append(nodes, head)
			continue
		}
		K := onnx.IntAttr(head, "K", 0)
		p := head.GetOutput()[0] + "/last"
		x := in[0]
		if len(in) > normSkipInput && in[normSkipInput] != "" {
			nodes = append(nodes, onnxNode("Add", []string{in[0], in[normSkipInput]}, p+".sum"))
			x = p + ".sum"
		}
		nodes = append(nodes,
			onnxNode("Unsqueeze", []string{in[lastIndexInput], addInt64s(g, p+".axes", 1, 2)}, p+".index"),
			onnxNode("Expand", []string{p + ".index", addInt64s(g, p+".shape", 1, 1, K)}, p+".indices"),
			onnxNode("GatherElements", []string{x, p + ".indices"}, p+".rows", onnx.AttrInt("axis", 1)),
			onnxNode("Reshape", []string{p + ".rows", addInt64s(g, p+".flat", -1, K)}, p+".row"))
		head.Input = []string{p + ".row", in[1], in[2], "", in[normWeightInput]}
		nodes = append(nodes, head)
		split = true
	}
	g.Node = nodes
	return split
}
