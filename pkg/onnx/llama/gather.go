package llama

import "github.com/edgeinfer/edgeinfer/pkg/onnx"

// The quantised embedding on the kernel. quant stores an int4 or int8
// token embedding as com.microsoft.GatherBlockQuantized of a uint8 table;
// on the kernel it runs as ai.edgeinfer.GatherBlockQuantized, the same
// inputs, attributes and floats (runtime/ort's gather_blocks.c says why),
// and SetMatMulKernel moves the nodes gatherRuns accepts back and forth with
// the projections.

// uint8Initializers says which of g's initializers are uint8 tensors.
func uint8Initializers(g *onnx.GraphProto) map[string]bool {
	uint8s := map[string]bool{}
	for _, t := range g.GetInitializer() {
		uint8s[t.GetName()] = t.GetDataType() == int32(onnx.TensorProto_UINT8)
	}
	return uint8s
}

// gatherRuns reports whether the kernel runs a GatherBlockQuantized node:
// a uint8 table (an initializer), bits 4 or 8, a block size that is a
// power of 2 from 16, gather_axis 0, quantize_axis 1 and no zero points
// (the attributes' defaults are com.microsoft's).
func gatherRuns(n *onnx.NodeProto, uint8s map[string]bool) bool {
	in := n.GetInput()
	if len(in) < 3 || !uint8s[in[0]] || !emptyFrom(in, 3) {
		return false
	}
	bits, block := onnx.IntAttr(n, "bits", 4), onnx.IntAttr(n, "block_size", 128)
	q := onnx.IntAttr(n, "quantize_axis", 1)
	return (bits == 4 || bits == 8) && block >= 16 && block&(block-1) == 0 && onnx.IntAttr(n, "gather_axis", 0) == 0 &&
		(q == 1 || q == -1)
}
