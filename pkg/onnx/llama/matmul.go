package llama

import (
	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// MetadataMatMul is the model metadata key that says which operator runs
// the int4 and int8 projections: MatMulKernel or MatMulPortable.
const (
	MetadataMatMul = "edgeinfer.matmul"
	// MatMulKernel: ai.edgeinfer.MatMulNBits, edgeinfer's int4/int8 kernel
	// (runtime/ort registers it with every session; the default, unless
	// Options.PortableMatMul).
	MatMulKernel = onnx.DomainEdgeInfer + ".MatMulNBits"
	// MatMulPortable: com.microsoft.MatMulNBits, ONNX Runtime's own.
	MatMulPortable = "portable"
)

// SetMatMulKernel moves the MatMulNBits nodes of m that edgeinfer's kernel
// runs — bits 4 or 8, block_size 32, no zero points, accuracy_level 4 (int8
// activations) — to ai.edgeinfer (kernel
// true) or back to com.microsoft (false), and records in the
// MetadataMatMul entry whether any node now runs on the kernel. The two operators take the same inputs and
// attributes, so the weights are untouched: a model built for one runs on
// the other after this. On the kernel, an MLP's gate/up projection and its
// SwiGLU activation become one node (swiglu.go), each RMSNorm joins the
// projection it feeds (norm.go), the head picks its last rows itself
// (lastrow.go) and gives the greedy token beside the logits (greedy.go),
// the quantised embedding moves with them (gather.go), and going back
// splits them again. It
// returns the number of nodes moved.
func SetMatMulKernel(m *onnx.ModelProto, kernel bool) int {
	if m.GetGraph() == nil {
		return 0 // no graph: nothing to move (the passes write to it)
	}
	from, to := onnx.DomainMicrosoft, onnx.DomainEdgeInfer
	if !kernel {
		from, to = to, from
	}
	if !kernel {
		splitGreedy(m.GetGraph())
		splitLastRow(m.GetGraph())
		splitNorm(m.GetGraph())
		splitSwiGLU(m.GetGraph())
	}
	moved := 0
	uint8s := uint8Initializers(m.GetGraph())
	for _, n := range m.GetGraph().GetNode() {
		runs := false
		switch n.GetOpType() {
		case "MatMulNBits":
			runs = kernelRuns(n)
		case "GatherBlockQuantized":
			runs = gatherRuns(n, uint8s)
		}
		if !runs || n.GetDomain() != from {
			continue
		}
		n.Domain = proto.String(to)
		moved++
	}
	if kernel {
		fuseSwiGLU(m.GetGraph())
		fuseNorm(m.GetGraph())
		fuseLastRow(m.GetGraph())
		fuseGreedy(m.GetGraph())
	}
	if moved > 0 {
		found := false
		for _, o := range m.OpsetImport {
			found = found || o.GetDomain() == to
		}
		if !found {
			m.OpsetImport = append(m.OpsetImport, &onnx.OperatorSetIdProto{Domain: proto.String(to), Version: proto.Int64(1)})
		}
	}
	value := MatMulPortable
	for _, n := range m.GetGraph().GetNode() {
		if n.GetOpType() == "MatMulNBits" && n.GetDomain() == onnx.DomainEdgeInfer {
			value = MatMulKernel
		}
	}
	for _, p := range m.MetadataProps {
		if p.GetKey() == MetadataMatMul {
			p.Value = proto.String(value)
			return moved
		}
	}
	m.MetadataProps = append(m.MetadataProps, &onnx.StringStringEntryProto{Key: proto.String(MetadataMatMul), Value: proto.String(value)})
	return moved
}

// kernelRuns reports whether a MatMulNBits node is one ai.edgeinfer's
// kernel runs (matmul_q4.c in runtime/ort).
func kernelRuns(n *onnx.NodeProto) bool {
	if !emptyFrom(n.GetInput(), 3) {
		return false // zero points, g_idx, bias
	}
	// accuracy_level 4 is int8 activations, the kernel's arithmetic; a
	// node asking for fp32 ones (0 or 1) keeps them
	bits, block, acc := int64(0), int64(0), int64(0)
	for _, a := range n.GetAttribute() {
		switch a.GetName() {
		case "bits":
			bits = a.GetI()
		case "block_size":
			block = a.GetI()
		case "accuracy_level":
			acc = a.GetI()
		}
	}
	return (bits == 4 || bits == 8) && block == 32 && acc == 4
}
