package llama

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/vec"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// int4Emitter is a minimal int4 block-32 symmetric emitter (quant's
// Emitter cannot be imported here: it imports this package), emitting
// com.microsoft.MatMulNBits with accuracy_level 4 as the int4-b32 scheme does.
type int4Emitter struct{ FP32Emitter }

func (int4Emitter) Scheme() string { return "int4-b32-test" }

func (int4Emitter) Linear(b *onnx.Builder, name, x string, w Tensor, bias []float32) (string, error) {
	n, k := w.Shape[0], w.Shape[1]
	nb, codes, scales := int4Blocks(w)
	y := b.MS("MatMulNBits", []string{x,
		b.Uint8(name+".qweight", []int64{int64(n), int64(nb), 16}, codes),
		b.Float32(name+".scales", []int64{int64(n * nb)}, scales)},
		onnx.AttrInt("K", int64(k)), onnx.AttrInt("N", int64(n)), onnx.AttrInt("bits", 4),
		onnx.AttrInt("block_size", 32), onnx.AttrInt("accuracy_level", 4))
	return y, b.Err()
}

// int4Blocks quantises w [n, k] symmetrically in blocks of 32 along k:
// the codes (low nibble first) and scales, nb blocks a row.
func int4Blocks(w Tensor) (nb int, codes []uint8, scales []float32) {
	n, k := w.Shape[0], w.Shape[1]
	nb = (k + 31) / 32
	codes, scales = make([]uint8, n*nb*16), make([]float32, n*nb)
	for r := range n {
		for blk := range nb {
			amax := float32(0)
			for c := blk * 32; c < min(k, blk*32+32); c++ {
				amax = max(amax, float32(math.Abs(float64(w.Data[r*k+c]))))
			}
			s := amax / 7
			scales[r*nb+blk] = s
			for c := blk * 32; c < blk*32+32; c++ {
				q := 8
				if c < k && s > 0 {
					q = min(15, max(0, int(math.Round(float64(w.Data[r*k+c]/s)))+8))
				}
				codes[(r*nb*32+c)/2] |= uint8(q) << (4 * (c % 2))
			}
		}
	}
	return nb, codes, scales
}

// int4EmbedEmitter is int4Emitter with the token embedding int4 too, as
// quant stores it: com.microsoft.GatherBlockQuantized of a uint8 table in
// blocks of 32.
type int4EmbedEmitter struct{ int4Emitter }

func (int4EmbedEmitter) Embedding(b *onnx.Builder, name, ids string, table Tensor) (string, error) {
	v, h := table.Shape[0], table.Shape[1]
	nb, codes, scales := int4Blocks(table)
	return b.MS("GatherBlockQuantized", []string{
		b.Uint8(name+".qweight", []int64{int64(v), int64(h / 2)}, codes), ids,
		b.Float32(name+".scales", []int64{int64(v), int64(nb)}, scales)},
		onnx.AttrInt("bits", 4), onnx.AttrInt("block_size", 32), onnx.AttrInt("gather_axis", 0), onnx.AttrInt("quantize_axis", 1)), b.Err()
}

// TestMatMulKernelEitherWay: a paged graph built with Options.MatMulKernel
// runs its int4 projections on ai.edgeinfer.MatMulNBits; SetMatMulKernel
// turns it into the portable graph (com.microsoft.MatMulNBits, the same
// weights) and back, and all three give the same logits.
func TestMatMulKernelEitherWay(t *testing.T) {
	orttest.Need(t)
	c, _ := tinyModel(t)
	kernel := tinyGraph(t, Options{BlockSize: 4, Emitter: int4Emitter{}})
	portable := tinyGraph(t, Options{BlockSize: 4, Emitter: int4Emitter{}, PortableMatMul: true})
	want := nodesOf(portable, "MatMulNBits", onnx.DomainMicrosoft)
	if want == 0 || nodesOf(kernel, "MatMulNBits", onnx.DomainEdgeInfer) != want || nodesOf(kernel, "MatMulNBits", onnx.DomainMicrosoft) != 0 {
		t.Fatalf("kernel graph: %d ai.edgeinfer and %d com.microsoft MatMulNBits, want %d and 0",
			nodesOf(kernel, "MatMulNBits", onnx.DomainEdgeInfer), nodesOf(kernel, "MatMulNBits", onnx.DomainMicrosoft), want)
	}
	converted := proto.Clone(kernel).(*onnx.ModelProto)
	if n := SetMatMulKernel(converted, false); n != want {
		t.Fatalf("SetMatMulKernel(kernel graph, false) moved %d nodes, want %d", n, want)
	}
	back := proto.Clone(portable).(*onnx.ModelProto)
	if n := SetMatMulKernel(back, true); n != want {
		t.Fatalf("SetMatMulKernel(portable graph, true) moved %d nodes, want %d", n, want)
	}
	// each layer's gate/up projection and SwiGLU are one node on the kernel
	fused := func(m *onnx.ModelProto) (swiglu, sigmoid int) {
		for _, node := range m.GetGraph().GetNode() {
			if onnx.IntAttr(node, attrSwiGLU, 0) == 1 {
				swiglu++
			}
			if node.GetOpType() == "Sigmoid" {
				sigmoid++
			}
		}
		return swiglu, sigmoid
	}
	for name, m := range map[string]*onnx.ModelProto{"kernel": kernel, "portable→kernel": back} {
		if sw, sig := fused(m); sw != c.NumHiddenLayers || sig != 0 {
			t.Errorf("%s graph: %d swiglu nodes and %d Sigmoids, want %d and 0", name, sw, sig, c.NumHiddenLayers)
		}
	}
	if sw, sig := fused(converted); sw != 0 || sig != c.NumHiddenLayers {
		t.Errorf("kernel→portable graph: %d swiglu nodes and %d Sigmoids, want 0 and %d", sw, sig, c.NumHiddenLayers)
	}
	// and every RMSNorm joins the projection it feeds: two a layer and the
	// final one
	norms := func(m *onnx.ModelProto) (folded, nodes int) {
		for _, node := range m.GetGraph().GetNode() {
			if in := node.GetInput(); node.GetOpType() == "MatMulNBits" && len(in) > normWeightInput && in[normWeightInput] != "" {
				folded++
			}
			if strings.HasSuffix(node.GetOpType(), "SimplifiedLayerNormalization") {
				nodes++
			}
		}
		return folded, nodes
	}
	for name, m := range map[string]*onnx.ModelProto{"kernel": kernel, "portable→kernel": back} {
		if f, n := norms(m); f != 2*c.NumHiddenLayers+1 || n != 0 {
			t.Errorf("%s graph: %d norms in projections and %d norm nodes, want %d and 0", name, f, n, 2*c.NumHiddenLayers+1)
		}
	}
	for name, m := range map[string]*onnx.ModelProto{"portable": portable, "kernel→portable": converted} {
		if f, n := norms(m); f != 0 || n != 2*c.NumHiddenLayers+1 {
			t.Errorf("%s graph: %d norms in projections and %d norm nodes, want 0 and %d", name, f, n, 2*c.NumHiddenLayers+1)
		}
	}

	const prompt, bs = 12, 4
	ids := randomIDs(3, prompt, c.VocabSize)
	table := []int64{2, 0, 3}
	logits := map[string][]float32{}
	for name, m := range map[string]*onnx.ModelProto{"kernel": kernel, "portable": portable,
		"kernel→portable": converted, "portable→kernel": back} {
		out := newPool(c, 4, bs).prefill(t, graphSession(t, m, 1), ids, table)
		logits[name] = out["logits"].data
		// on the kernel, the head gives each row's argmax beside the logits
		greedy, has := out[OutputGreedy]
		if kernel := !strings.HasSuffix(name, "portable"); has != kernel {
			t.Fatalf("%s graph: output %s present %v, want %v", name, OutputGreedy, has, kernel)
		}
		V := c.VocabSize
		for row, g := range greedy.ints {
			if want := vec.Argmax(logits[name][row*V : (row+1)*V]); g != int64(want) {
				t.Errorf("%s graph row %d: %s %d, the argmax of its logits %d", name, row, OutputGreedy, g, want)
			}
		}
		if has && len(greedy.ints) != len(logits[name])/V {
			t.Errorf("%s graph: %d greedy tokens for %d rows of logits", name, len(greedy.ints), len(logits[name])/V)
		}
	}
	// Both quantise activations to int8 per block of 32, but ONNX Runtime's
	// arm64 MatMulNBits rounds them differently from its x86 one (and from
	// the kernel, which matches x86 to float rounding), so the bound is the
	// noise of that quantisation: 2 % of the logits' range. A wrong nibble
	// order or scale moves logits by their whole range.
	scale := 0.0
	for _, l := range logits["portable"] {
		scale = max(scale, math.Abs(float64(l)))
	}
	for _, name := range []string{"kernel", "kernel→portable", "portable→kernel"} {
		d := maxDiff(logits[name], logits["portable"])
		t.Logf("%s vs portable: max |Δlogit| = %.2g (logits up to %.3g)", name, d, scale)
		if d > 0.02*scale {
			t.Errorf("%s: logits differ from the portable graph's by %g, more than 2%% of %g", name, d, scale)
		}
	}
}
