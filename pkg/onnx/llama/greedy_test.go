package llama

import (
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// TestGreedyOutputWhere: the head gives OutputGreedy on the kernel's
// paged graph once, however often the graph is moved to the kernel; not
// with AllLogits (logits per position) nor on the portable graph; and
// moving a graph off the kernel takes both the graph output and the
// node's output away.
func TestGreedyOutputWhere(t *testing.T) {
	build := func(opts Options) *onnx.ModelProto {
		opts.BlockSize, opts.Emitter = 4, int4Emitter{}
		return tinyGraph(t, opts)
	}
	count := func(m *onnx.ModelProto) (outputs, producers int) {
		for _, o := range m.GetGraph().GetOutput() {
			if o.GetName() == OutputGreedy {
				outputs++
				if tt := o.GetType().GetTensorType(); tt.GetElemType() != int32(onnx.TensorProto_INT64) || len(tt.GetShape().GetDim()) != 1 {
					t.Errorf("%s: element type %d, rank %d; want int64 [batch]", OutputGreedy, tt.GetElemType(), len(tt.GetShape().GetDim()))
				}
			}
		}
		for _, n := range m.GetGraph().GetNode() {
			for i, out := range n.GetOutput() {
				if out == OutputGreedy {
					producers++
					if n.GetOpType() != "MatMulNBits" || n.GetDomain() != onnx.DomainEdgeInfer || i != greedyOutput {
						t.Errorf("%s comes from output %d of %s.%s, want output %d of the kernel's MatMulNBits", OutputGreedy, i, n.GetDomain(), n.GetOpType(), greedyOutput)
					}
				}
			}
		}
		return outputs, producers
	}
	kernel := build(Options{})
	SetMatMulKernel(kernel, true) // a second time: nothing more
	if o, p := count(kernel); o != 1 || p != 1 {
		t.Fatalf("kernel graph: %d outputs and %d producers of %s, want 1 and 1", o, p, OutputGreedy)
	}
	for name, m := range map[string]*onnx.ModelProto{"AllLogits": build(Options{AllLogits: true}), "portable": build(Options{PortableMatMul: true})} {
		if o, p := count(m); o != 0 || p != 0 {
			t.Errorf("%s graph: %d outputs and %d producers of %s, want none", name, o, p, OutputGreedy)
		}
	}
	SetMatMulKernel(kernel, false)
	if o, p := count(kernel); o != 0 || p != 0 {
		t.Errorf("kernel→portable graph: %d outputs and %d producers of %s, want none", o, p, OutputGreedy)
	}
	for _, n := range kernel.GetGraph().GetNode() {
		if n.GetOpType() == "MatMulNBits" && len(n.GetOutput()) > 2 {
			t.Errorf("kernel→portable graph: MatMulNBits %s keeps outputs %q", n.GetName(), n.GetOutput())
		}
	}
}
