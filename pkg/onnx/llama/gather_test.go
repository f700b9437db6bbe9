package llama

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// TestGatherOnKernel: an int4 embedding runs as
// ai.edgeinfer.GatherBlockQuantized on the kernel and as com.microsoft's
// on the portable graph, and the kernel graph with only the embedding
// moved back gives the same logits bit for bit.
func TestGatherOnKernel(t *testing.T) {
	orttest.Need(t)
	c, _ := tinyModel(t)
	kernel := tinyGraph(t, Options{BlockSize: 4, Emitter: int4EmbedEmitter{}})
	if n := nodesOf(kernel, "GatherBlockQuantized", onnx.DomainEdgeInfer); n != 1 {
		t.Fatalf("kernel graph: %d ai.edgeinfer.GatherBlockQuantized nodes, want 1", n)
	}
	portable := proto.Clone(kernel).(*onnx.ModelProto)
	SetMatMulKernel(portable, false)
	if n := nodesOf(portable, "GatherBlockQuantized", onnx.DomainMicrosoft); n != 1 {
		t.Fatalf("portable graph: %d com.microsoft.GatherBlockQuantized nodes, want 1", n)
	}
	theirs := proto.Clone(kernel).(*onnx.ModelProto)
	for _, n := range theirs.GetGraph().GetNode() { // the embedding alone back to com.microsoft
		if n.GetOpType() == "GatherBlockQuantized" {
			n.Domain = proto.String(onnx.DomainMicrosoft)
		}
	}
	ids := randomIDs(5, 12, c.VocabSize)
	var logits [2][]float32
	for i, m := range []*onnx.ModelProto{kernel, theirs} {
		logits[i] = newPool(c, 4, 4).prefill(t, graphSession(t, m, 2), ids, []int64{2, 0, 3})["logits"].data
	}
	sameBits(t, "logits with ai.edgeinfer's embedding against com.microsoft's", logits[0], logits[1])
}
