package llama

import (
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// OutputGreedy is the paged graph's int64 output [batch] on the kernel:
// each row's greedy token, the index of its largest logit as pkg/vec's
// Argmax picks it (the first of equals, NaNs never), found by the
// language-model head's ai.edgeinfer.MatMulNBits (its output 2) while it
// writes the logits. A sampler that would only take the argmax of an
// untouched row reads it instead of the row: at batch 8 and a 32k
// vocabulary that row read was 1 MiB a step, half of it in the other
// core's cache (runtime/engine's BenchmarkBatchScaling logs the sampling
// phase). The logits are still written: other rows of the same step may
// sample, mask or take log-probabilities.
const OutputGreedy = "greedy_token"

// greedyOutput is the head node's output index that OutputGreedy is.
const greedyOutput = 2

// fuseGreedy gives the kernel MatMulNBits that computes the graph output
// "logits" [batch, vocab] (directly, or through an Identity) its output 2
// as the graph output OutputGreedy. It reports whether it added it: not
// where the graph has it already, its logits are per position (rank 3),
// or the head is not on the kernel.
func fuseGreedy(g *onnx.GraphProto) bool {
	var logits *onnx.ValueInfoProto
	for _, o := range g.GetOutput() {
		switch o.GetName() {
		case OutputGreedy:
			return false
		case "logits":
			logits = o
		}
	}
	if logits == nil || len(logits.GetType().GetTensorType().GetShape().GetDim()) != 2 {
		return false
	}
	producer := map[string]*onnx.NodeProto{}
	for _, n := range g.GetNode() {
		for _, out := range n.GetOutput() {
			producer[out] = n
		}
	}
	head := producer["logits"]
	if head != nil && head.GetOpType() == "Identity" && len(head.GetInput()) == 1 {
		head = producer[head.GetInput()[0]]
	}
	if head == nil || head.GetOpType() != "MatMulNBits" || head.GetDomain() != onnx.DomainEdgeInfer ||
		onnx.IntAttr(head, "swiglu", 0) != 0 || len(head.GetOutput()) > greedyOutput {
		return false
	}
	for len(head.Output) < greedyOutput {
		head.Output = append(head.Output, "")
	}
	head.Output = append(head.Output, OutputGreedy)
	out := proto.Clone(logits).(*onnx.ValueInfoProto)
	out.Name = proto.String(OutputGreedy)
	t := out.GetType().GetTensorType()
	t.ElemType = proto.Int32(int32(onnx.TensorProto_INT64))
	t.Shape.Dim = t.Shape.Dim[:1]
	g.Output = append(g.Output, out)
	return true
}

// splitGreedy is fuseGreedy undone (before the head leaves the kernel,
// whose output 2 com.microsoft.MatMulNBits has not): the graph output and
// the node's output go. It reports whether there was one.
func splitGreedy(g *onnx.GraphProto) bool {
	n := len(g.GetOutput())
	g.Output = slices.DeleteFunc(g.Output, func(o *onnx.ValueInfoProto) bool { return o.GetName() == OutputGreedy })
	for _, node := range g.GetNode() {
		if out := node.GetOutput(); node.GetOpType() == "MatMulNBits" && len(out) > greedyOutput && out[greedyOutput] == OutputGreedy {
			out = out[:greedyOutput]
			for len(out) > 1 && out[len(out)-1] == "" {
				out = out[:len(out)-1]
			}
			node.Output = out
		}
	}
	return len(g.GetOutput()) != n
}
