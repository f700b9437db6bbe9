package quant

import (
	"context"
	"errors"
	"fmt"
	"github.com/edgeinfer/edgeinfer/pkg/f16"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"google.golang.org/protobuf/proto"
)

// Options configures QuantizeFile. It is plain data.
type Options struct {
	Scheme Scheme
	// Keep lists substrings of initializer or node names whose weights stay
	// fp32 ("lm_head", "embed").
	Keep []string
	// ExternalThreshold: initializers of at least this many bytes go to the
	// data file beside the output; 0 means 64 KiB.
	ExternalThreshold int
	// Logger receives one debug record per weight; nil discards.
	Logger *slog.Logger
	// PortableMatMul keeps QuantizeBundle's int4 and int8 products on
	// com.microsoft.MatMulNBits. By default a bundle, which runs on
	// edgeinfer's runtime, has those edgeinfer's ai.edgeinfer.MatMulNBits
	// runs (block 32, symmetric, int8 activations) on it
	// (llama.SetMatMulKernel). QuantizeFile writes a plain model that may
	// run anywhere, so it always keeps the portable operator.
	PortableMatMul bool
}

// Result says what QuantizeFile did.
type Result struct {
	// Scheme is the canonical scheme name recorded in manifests.
	Scheme string
	// Layers is the per-weight table, in graph order.
	Layers []Layer
	// Files are the base names written: the model and, when any tensor
	// went there, its external data file (model name + ".data").
	Files []string
}

// QuantizeFile rewrites the ONNX model at in into out, replacing every MatMul
// whose B is a constant 2-D float32 initializer [K, N] — and every Gemm with
// such a B (transB 0 or 1, alpha 1, transA 0, beta 1) — by
// com.microsoft.MatMulNBits over B transposed to [N, K], or, under fp16, by
// a float16 initializer and a Cast. Weights are read one at a time (external
// data included) and written at once to out's data file, so memory holds
// about one weight beyond the graph. Under int4/int8, embedding tables
// (Gather on axis 0 of a constant [vocab, hidden]) become
// com.microsoft.GatherBlockQuantized unless kept (embed.go).
//
// A graph with no such weight returns ErrNothingToQuantize and writes
// nothing; a constant MatMul weight of another float type returns ErrDType.
func QuantizeFile(ctx context.Context, in, out string, opts Options) (*Result, error) {
	return quantizeFile(ctx, in, out, opts, false)
}

// quantizeFile is QuantizeFile, the kernel's products moved to
// ai.edgeinfer.MatMulNBits where kernel.
func quantizeFile(ctx context.Context, in, out string, opts Options, kernel bool) (*Result, error) {
	if err := opts.Scheme.Validate(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(in)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	m := &onnx.ModelProto{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrModel, in, err)
	}
	data = nil
	if m.GetGraph() == nil {
		return nil, fmt.Errorf("%w: %s has no graph", ErrModel, in)
	}
	p := &pass{opts: opts, srcDir: filepath.Dir(in), g: m.GetGraph(), log: opts.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.index()
	plan, err := p.plan()
	if err != nil {
		return nil, err
	}
	if len(plan) == 0 {
		return nil, fmt.Errorf("%w: %s has no MatMul/Gemm with a constant float32 2-D weight (scheme %s)", ErrNothingToQuantize, in, opts.Scheme)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	dataName := filepath.Base(out) + ".data"
	f, err := os.Create(filepath.Join(filepath.Dir(out), dataName))
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	thr := opts.ExternalThreshold
	if thr <= 0 {
		thr = 64 << 10
	}
	p.w = &dataWriter{f: f, location: dataName, threshold: thr}
	res, err := p.run(ctx, m, plan)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("quant: %w", cerr)
	}
	if err == nil {
		if kernel {
			llama.SetMatMulKernel(m, true)
		}
		var raw []byte
		if raw, err = proto.Marshal(m); err == nil {
			err = os.WriteFile(out, raw, 0o644)
		}
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return nil, err
	}
	res.Files = []string{filepath.Base(out)}
	if p.w.offset > 0 {
		res.Files = append(res.Files, dataName)
	} else if err := os.Remove(f.Name()); err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	return res, nil
}

// pass is one run of the graph rewrite. Not safe for concurrent use.
type pass struct {
	opts   Options
	srcDir string
	g      *onnx.GraphProto
	log    *slog.Logger
	w      *dataWriter
	inits  map[string]*onnx.TensorProto
	uses   map[string]int
	seq    int
}

// target is one node to rewrite: its index and how to read its weight.
type target struct {
	node   int
	weight string
	transB bool // weight already [N, K] (Gemm transB=1)
	bias   string
}

func (p *pass) index() {
	p.inits = map[string]*onnx.TensorProto{}
	for _, t := range p.g.GetInitializer() {
		p.inits[t.GetName()] = t
	}
	p.uses = map[string]int{}
	for _, n := range p.g.GetNode() {
		for _, in := range n.GetInput() {
			p.uses[in]++
		}
	}
	for _, o := range p.g.GetOutput() {
		p.uses[o.GetName()]++
	}
}

// plan picks the nodes to rewrite and checks their weights' types.
func (p *pass) plan() ([]target, error) {
	var plan []target
	for i, n := range p.g.GetNode() {
		if n.GetDomain() != "" && n.GetDomain() != "ai.onnx" {
			continue
		}
		var tg target
		switch n.GetOpType() {
		case "MatMul":
		case "Gemm":
			if onnx.IntAttr(n, "transA", 0) != 0 || onnx.FloatAttr(n, "alpha", 1) != 1 ||
				(len(n.Input) > 2 && n.Input[2] != "" && onnx.FloatAttr(n, "beta", 1) != 1) {
				continue
			}
			tg.transB = onnx.IntAttr(n, "transB", 0) != 0
			if len(n.Input) > 2 {
				tg.bias = n.Input[2]
			}
		default:
			continue
		}
		if len(n.Input) < 2 {
			continue
		}
		w, ok := p.inits[n.Input[1]]
		if !ok || len(w.GetDims()) != 2 {
			continue
		}
		if dt := onnx.TensorProto_DataType(w.GetDataType()); dt != onnx.TensorProto_FLOAT {
			return nil, fmt.Errorf("%w: %s weight %q is %s (want float32)", ErrDType, n.GetOpType(), w.GetName(), onnx.TypeName(dt))
		}
		tg.node, tg.weight = i, w.GetName()
		plan = append(plan, tg)
	}
	return plan, nil
}

// initSpec is one initializer of a quantised weight: a name suffix, its
// type and shape, and its raw little-endian data.
type initSpec struct {
	suffix string
	dt     onnx.TensorProto_DataType
	dims   []int64
	raw    []byte
}

// matmulNodes is the com.microsoft op (on ins, with attrs) that replaces
// the MatMul/Gemm node n, followed by an Add of its bias when it had one.
func (p *pass) matmulNodes(n *onnx.NodeProto, bias, op string, ins []string, attrs []*onnx.AttributeProto) []*onnx.NodeProto {
	out := n.Output[0]
	if bias != "" {
		out = p.fresh(n.Output[0] + "_" + op)
	}
	nodes := []*onnx.NodeProto{{Name: proto.String(n.GetName() + "_" + op), OpType: proto.String(op),
		Domain: proto.String(onnx.DomainMicrosoft), Input: ins, Output: []string{out}, Attribute: attrs}}
	if bias != "" {
		nodes = append(nodes, &onnx.NodeProto{Name: proto.String(n.GetName() + "_bias"), OpType: proto.String("Add"),
			Input: []string{out, bias}, Output: []string{n.Output[0]}})
	}
	return nodes
}

func (p *pass) fresh(prefix string) string {
	p.seq++
	return fmt.Sprintf("%s_q%d", prefix, p.seq)
}

// run rewrites the planned nodes and re-homes every initializer into the
// output's data file.
func (p *pass) run(ctx context.Context, m *onnx.ModelProto, plan []target) (*Result, error) {
	res := &Result{Scheme: p.opts.Scheme.String()}
	replaced := map[int][]*onnx.NodeProto{}
	var prepend []*onnx.NodeProto
	drop := map[string]bool{}
	var added []*onnx.TensorProto
	for _, tg := range plan {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := p.g.Node[tg.node]
		wt := p.inits[tg.weight]
		k, nn := int(wt.Dims[0]), int(wt.Dims[1])
		if tg.transB {
			nn, k = k, nn
		}
		before := 4 * int64(k) * int64(nn)
		if keepMatch(tg.weight, p.opts.Keep) || keepMatch(n.GetName(), p.opts.Keep) {
			res.Layers = append(res.Layers, Layer{Name: tg.weight, Shape: []int{nn, k}, Format: "fp32 (kept)", BytesBefore: before, BytesAfter: before})
			continue
		}
		vals, err := TensorFloat32(wt, p.srcDir)
		if err != nil {
			return nil, err
		}
		shared := p.uses[tg.weight] > 1
		if p.opts.Scheme.Format == FormatFP16 {
			if shared {
				res.Layers = append(res.Layers, Layer{Name: tg.weight, Shape: []int{nn, k}, Format: "fp32 (kept: shared)", BytesBefore: before, BytesAfter: before})
				continue
			}
			// The fp16 copy keeps B's layout; a Cast recreates the fp32
			// value under the old name, so no consumer changes.
			half := &onnx.TensorProto{Name: proto.String(tg.weight + "_fp16"), DataType: proto.Int32(int32(onnx.TensorProto_FLOAT16)), Dims: wt.Dims}
			if err := p.w.place(half, uint16Bytes(f16.FromFloat32s(vals))); err != nil {
				return nil, fmt.Errorf("quant: %w", err)
			}
			added = append(added, half)
			drop[tg.weight] = true
			prepend = append(prepend, &onnx.NodeProto{Name: proto.String(p.fresh("cast")), OpType: proto.String("Cast"),
				Input: []string{half.GetName()}, Output: []string{tg.weight},
				Attribute: []*onnx.AttributeProto{onnx.AttrInt("to", int64(onnx.TensorProto_FLOAT))}})
			res.Layers = append(res.Layers, Layer{Name: tg.weight, Shape: []int{nn, k}, Format: "fp16", BytesBefore: before, BytesAfter: before / 2, RelRMS: fp16Error(vals)})
			continue
		}
		if k%p.opts.Scheme.BlockSize != 0 && !p.opts.Scheme.PadK && p.opts.Scheme.Format != FormatInt8PerChannel {
			return nil, fmt.Errorf("%w: %q has K=%d, block %d (pad with -pad or pick a smaller block)", ErrBlockSize, tg.weight, k, p.opts.Scheme.BlockSize)
		}
		nk := vals
		if !tg.transB {
			nk = transposeF32(vals, k, nn)
		}
		// The quantised weight: its op, initializers and attributes.
		var (
			op     string
			specs  []initSpec
			attrs  []*onnx.AttributeProto
			after  int64
			relRMS float64
		)
		if p.opts.Scheme.Format == FormatInt8PerChannel {
			pc, err := QuantizePerChannel(nk, nn, k)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", tg.weight, err)
			}
			relRMS, after = RelativeRMS(nk, pc.Dequantize()), pc.Bytes()
			op = "DynamicQuantizeMatMul"
			specs = []initSpec{
				{"_qweight_int8", onnx.TensorProto_INT8, []int64{int64(k), int64(nn)}, int8Bytes(pc.B)},
				{"_scales", onnx.TensorProto_FLOAT, []int64{int64(nn)}, float32Bytes(pc.Scales)},
			}
		} else {
			q, err := QuantizeBlockwise(nk, nn, k, p.opts.Scheme.Bits(), p.opts.Scheme.BlockSize, p.opts.Scheme.Asymmetric)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", tg.weight, err)
			}
			relRMS, after = RelativeRMS(nk, q.Dequantize()), q.Bytes()
			nb := int64(q.Blocks())
			op, attrs = "MatMulNBits", nbitsAttrs(q, p.opts.Scheme.AccuracyLevel)
			specs = []initSpec{
				{"_qweight", onnx.TensorProto_UINT8, []int64{int64(nn), nb, int64(q.BlockSize * q.Bits / 8)}, q.B},
				{"_scales", onnx.TensorProto_FLOAT, []int64{int64(nn) * nb}, float32Bytes(q.Scales)},
				{"_zero_points", onnx.TensorProto_UINT8, []int64{int64(len(q.ZeroPoints))}, q.ZeroPoints},
			}
		}
		vals, nk = nil, nil
		// The initializers are named after the weight (nil data: none), and
		// the new node takes the activation, then them.
		ins := []string{n.Input[0]}
		for _, c := range specs {
			if c.raw == nil {
				continue
			}
			t := &onnx.TensorProto{Name: proto.String(tg.weight + c.suffix), DataType: proto.Int32(int32(c.dt)), Dims: c.dims}
			if _, dup := p.inits[t.GetName()]; dup {
				t.Name = proto.String(p.fresh(t.GetName()))
			}
			added = append(added, t)
			if err := p.w.place(t, c.raw); err != nil {
				return nil, fmt.Errorf("quant: %w", err)
			}
			ins = append(ins, t.GetName())
		}
		replaced[tg.node] = p.matmulNodes(n, tg.bias, op, ins, attrs)
		if p.uses[tg.weight]--; p.uses[tg.weight] == 0 {
			drop[tg.weight] = true
		}
		res.Layers = append(res.Layers, Layer{Name: tg.weight, Shape: []int{nn, k}, Format: res.Scheme, BytesBefore: before, BytesAfter: after, RelRMS: relRMS})
		p.log.Debug("quantised", "weight", tg.weight, "n", nn, "k", k, "rel_rms", relRMS)
	}
	if p.opts.Scheme.Format != FormatFP16 {
		emb, err := p.quantizeGathers(res, replaced, drop)
		if err != nil {
			return nil, err
		}
		added = append(added, emb...)
	}
	nodes := append([]*onnx.NodeProto(nil), prepend...)
	for i, n := range p.g.Node {
		if r, ok := replaced[i]; ok {
			nodes = append(nodes, r...)
		} else {
			nodes = append(nodes, n)
		}
	}
	p.g.Node = nodes
	// Re-home the untouched initializers into the output's data file, one
	// at a time, then append the new ones (already placed).
	var inits []*onnx.TensorProto
	for _, t := range p.g.Initializer {
		if drop[t.GetName()] {
			continue
		}
		if t.GetDataLocation() == onnx.TensorProto_EXTERNAL {
			raw, err := tensorBytes(t, p.srcDir)
			if err != nil {
				return nil, err
			}
			if err := p.w.place(t, raw); err != nil {
				return nil, fmt.Errorf("quant: %w", err)
			}
		}
		inits = append(inits, t)
	}
	p.g.Initializer = append(inits, added...)
	if p.opts.Scheme.Format != FormatFP16 {
		ensureOpset(m, onnx.DomainMicrosoft, 1)
	}
	if _, _, nq := Totals(res.Layers); nq == 0 {
		return nil, errors.Join(ErrNothingToQuantize, fmt.Errorf("quant: every candidate weight was kept (%d)", len(res.Layers)))
	}
	return res, nil
}

func ensureOpset(m *onnx.ModelProto, domain string, version int64) {
	for _, o := range m.OpsetImport {
		if o.GetDomain() == domain {
			return
		}
	}
	m.OpsetImport = append(m.OpsetImport, &onnx.OperatorSetIdProto{Domain: proto.String(domain), Version: proto.Int64(version)})
}

// transposeF32 returns the [cols, rows] transpose of a row-major [rows, cols]
// matrix, in cache-friendly tiles.
func transposeF32(src []float32, rows, cols int) []float32 {
	dst := make([]float32, len(src))
	const tile = 32
	for r0 := 0; r0 < rows; r0 += tile {
		for c0 := 0; c0 < cols; c0 += tile {
			for r := r0; r < min(r0+tile, rows); r++ {
				for c := c0; c < min(c0+tile, cols); c++ {
					dst[c*rows+r] = src[r*cols+c]
				}
			}
		}
	}
	return dst
}
