package quant

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// Static int8 in the QDQ format — the form NPU toolchains consume (QNN HTP,
// OpenVINO NPU, RKNN) and ONNX Runtime's CPU EP fuses into QLinearConv:
// activations around Conv, ConvTranspose, MatMul and Gemm pass through
// QuantizeLinear/DequantizeLinear pairs (uint8, asymmetric, ranges from
// calibration); their weights are int8, symmetric, one scale per output
// channel, behind a DequantizeLinear; biases are int32 with scale
// s_input·s_weight, as the QLinear kernels expect.

// QDQScheme is the scheme name QuantizeQDQ records.
const QDQScheme = "qdq-int8"

// qdqOps are the operators whose inputs and outputs are quantised.
var qdqOps = []string{"Conv", "ConvTranspose", "MatMul", "Gemm"}

// QDQModel is a float model prepared for static quantisation: Constant
// nodes folded into initializers and the activations to calibrate picked.
// It is not safe for concurrent use.
type QDQModel struct {
	m      *onnx.ModelProto
	srcDir string
	inits  map[string]*onnx.TensorProto
	// initialInits is the initializer count before folding Constants.
	initialInits int
	// Targets are the activation tensors QuantizeQDQ wraps in Q/DQ, in
	// graph order; Calibrate must measure each.
	Targets []string
	// OpsetNote says how the model's opset was lifted to take QDQ nodes
	// ("" when it was not).
	OpsetNote string
}

// OpenQDQ reads the float32 ONNX model at path and prepares it.
func OpenQDQ(path string) (*QDQModel, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	m := &onnx.ModelProto{}
	if err := proto.Unmarshal(raw, m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrModel, path, err)
	}
	if m.GetGraph() == nil {
		return nil, fmt.Errorf("%w: %s has no graph", ErrModel, path)
	}
	q := &QDQModel{m: m, srcDir: filepath.Dir(path)}
	q.foldConstants()
	q.OpsetNote = q.upgradeOpset()
	q.pickTargets()
	return q, nil
}

// Inputs are the model's graph inputs that are not initializers, with their
// shapes (-1 for a symbolic dimension).
func (q *QDQModel) Inputs() []InputSpec {
	var out []InputSpec
	for _, v := range q.m.GetGraph().GetInput() {
		if _, ok := q.inits[v.GetName()]; ok {
			continue
		}
		tt := v.GetType().GetTensorType()
		spec := InputSpec{Name: v.GetName(), DType: onnx.TensorProto_DataType(tt.GetElemType())}
		for _, d := range tt.GetShape().GetDim() {
			if d.GetDimParam() == "" && d.GetDimValue() > 0 {
				spec.Shape = append(spec.Shape, d.GetDimValue())
			} else {
				spec.Shape = append(spec.Shape, -1)
			}
		}
		out = append(out, spec)
	}
	return out
}

// Outputs are the model's graph output names.
func (q *QDQModel) Outputs() []string {
	var out []string
	for _, v := range q.m.GetGraph().GetOutput() {
		out = append(out, v.GetName())
	}
	return out
}

// foldConstants turns Constant nodes holding a tensor into initializers of
// the same name (exporters such as paddle2onnx store every weight that
// way), so weights are found in one place.
func (q *QDQModel) foldConstants() {
	g := q.m.GetGraph()
	q.initialInits = len(g.GetInitializer())
	var nodes []*onnx.NodeProto
	for _, n := range g.GetNode() {
		if n.GetOpType() == "Constant" && n.GetDomain() == "" && len(n.GetOutput()) == 1 && len(n.GetAttribute()) == 1 &&
			n.GetAttribute()[0].GetName() == "value" && n.GetAttribute()[0].GetT() != nil {
			t := n.GetAttribute()[0].GetT()
			t.Name = proto.String(n.GetOutput()[0])
			g.Initializer = append(g.Initializer, t)
			continue
		}
		nodes = append(nodes, n)
	}
	g.Node = nodes
	q.inits = map[string]*onnx.TensorProto{}
	for _, t := range g.GetInitializer() {
		q.inits[t.GetName()] = t
	}
}

func (q *QDQModel) isFloatInit(name string) bool {
	t, ok := q.inits[name]
	return ok && onnx.TensorProto_DataType(t.GetDataType()) == onnx.TensorProto_FLOAT
}

// pickTargets collects the activations around qdqOps: each one's data
// input (both MatMul inputs when B is computed) and its output, graph
// outputs excepted (the caller gets float32 back as before).
func (q *QDQModel) pickTargets() {
	g := q.m.GetGraph()
	outs := map[string]bool{}
	for _, o := range g.GetOutput() {
		outs[o.GetName()] = true
	}
	// A Conv feeding BatchNormalization (not folded by the exporter) has
	// an output range BN then scales down — PaddleOCR's head: ±13 800
	// before BN — so its Q/DQ would cost the layer most of its bits. The
	// pair is left in float between them, as ONNX Runtime fuses it.
	intoBN := map[string]bool{}
	for _, n := range g.GetNode() {
		if n.GetOpType() == "BatchNormalization" && len(n.Input) > 0 {
			intoBN[n.Input[0]] = true
		}
	}
	seen := map[string]bool{}
	add := func(name string) {
		if name == "" || seen[name] || outs[name] {
			return
		}
		if _, ok := q.inits[name]; ok {
			return
		}
		seen[name] = true
		q.Targets = append(q.Targets, name)
	}
	for _, n := range g.GetNode() {
		if n.GetDomain() != "" || !slices.Contains(qdqOps, n.GetOpType()) || len(n.Input) < 2 {
			continue
		}
		add(n.Input[0])
		if n.GetOpType() == "MatMul" {
			add(n.Input[1])
		}
		if !intoBN[n.Output[0]] {
			add(n.Output[0])
		}
	}
}

// CalibrationModel returns the model serialised with every target added as
// a graph output and every tensor inline, for a Runner to load from bytes.
// The receiver is not changed.
func (q *QDQModel) CalibrationModel() ([]byte, error) {
	m := proto.Clone(q.m).(*onnx.ModelProto)
	g := m.GetGraph()
	for _, t := range g.GetInitializer() {
		if t.GetDataLocation() == onnx.TensorProto_EXTERNAL {
			raw, err := tensorBytes(t, q.srcDir)
			if err != nil {
				return nil, err
			}
			t.RawData, t.ExternalData, t.DataLocation = raw, nil, nil
		}
	}
	have := map[string]bool{}
	for _, o := range g.GetOutput() {
		have[o.GetName()] = true
	}
	for _, name := range q.Targets {
		if have[name] {
			continue
		}
		g.Output = append(g.Output, &onnx.ValueInfoProto{Name: proto.String(name), Type: &onnx.TypeProto{
			Value: &onnx.TypeProto_TensorType{TensorType: &onnx.TypeProto_Tensor{ElemType: proto.Int32(int32(onnx.TensorProto_FLOAT))}}}})
	}
	return proto.Marshal(m)
}

// QDQOptions configures QuantizeQDQ. It is plain data.
type QDQOptions struct {
	// Ranges are the calibrated activation ranges (Calibrator.Ranges); a
	// target without one leaves its operators in float.
	Ranges map[string]Range
	// Keep lists substrings of node or weight names left in float.
	Keep []string
	// ReduceRange stores weights in 7 bits ([-63, 63]). ONNX Runtime's
	// x86 u8·s8 kernels without VNNI (AVX2, AVX-512F) add pairs of u8·s8
	// products in saturating int16: 255·127·2 overflows, so a full-range
	// QDQ model's outputs come out too small there (TestQuantizeQDQOnORT
	// compares a 7-bit model's outputs with fp32's). NPUs (QNN HTP,
	// OpenVINO NPU, RKNN) and ARM/VNNI CPUs have no such limit: leave it
	// off for them.
	ReduceRange bool
}

// QuantizeQDQ writes the QDQ int8 model to out (tensors inline: vision and
// audio models are far below protobuf's 2 GiB) and returns the per-weight
// table. The model is changed in place; open it again to quantise twice.
func (q *QDQModel) QuantizeQDQ(ctx context.Context, out string, opts QDQOptions) (*Result, error) {
	g := q.m.GetGraph()
	res := &Result{Scheme: QDQScheme}
	if err := q.Supported(); err != nil {
		return nil, err
	}
	opset := q.opset()
	perChannel := q.perChannelOK(opset)
	producer := map[string]int{}
	for i, n := range g.GetNode() {
		for _, o := range n.GetOutput() {
			producer[o] = i
		}
	}
	var added []*onnx.TensorProto
	addInit := func(t *onnx.TensorProto) string {
		if _, dup := q.inits[t.GetName()]; dup {
			t.Name = proto.String(t.GetName() + "_qdq")
		}
		q.inits[t.GetName()] = t
		added = append(added, t)
		return t.GetName()
	}
	// Activations: Q/DQ right after the producer (or first, for graph
	// inputs); every consumer then reads the DQ output.
	after := map[int][]*onnx.NodeProto{} // producer index (-1: graph input) → nodes
	rename := map[string]string{}
	params := map[string]actParams{}
	for _, name := range q.Targets {
		r, ok := opts.Ranges[name]
		if !ok {
			continue
		}
		ap := activationParams(r)
		params[name] = ap
		scale := addInit(scalarFloat(name+"_scale", ap.scale))
		zp := addInit(&onnx.TensorProto{Name: proto.String(name + "_zero_point"), DataType: proto.Int32(int32(onnx.TensorProto_UINT8)), RawData: []byte{ap.zp}})
		qn, dqn := name+"_quantized", name+"_dequantized"
		at, ok := producer[name]
		if !ok {
			at = -1
		}
		after[at] = append(after[at],
			&onnx.NodeProto{Name: proto.String(name + "_QuantizeLinear"), OpType: proto.String("QuantizeLinear"), Input: []string{name, scale, zp}, Output: []string{qn}},
			&onnx.NodeProto{Name: proto.String(name + "_DequantizeLinear"), OpType: proto.String("DequantizeLinear"), Input: []string{qn, scale, zp}, Output: []string{dqn}})
		rename[name] = dqn
	}
	for _, n := range g.GetNode() {
		for j, in := range n.Input {
			if r, ok := rename[in]; ok {
				n.Input[j] = r
			}
		}
	}
	// Weights and biases of the operators whose data input is quantised.
	uses := map[string]int{}
	for _, n := range g.GetNode() {
		for _, in := range n.GetInput() {
			uses[in]++
		}
	}
	drop := map[string]bool{}
	before := map[int][]*onnx.NodeProto{}
	wdq := map[string]string{}
	for i, n := range g.GetNode() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if n.GetDomain() != "" || !slices.Contains(qdqOps, n.GetOpType()) || len(n.Input) < 2 {
			continue
		}
		orig := func(s string) string { // the float name behind a DQ output
			for k, v := range rename {
				if v == s {
					return k
				}
			}
			return s
		}
		xp, ok := params[orig(n.Input[0])]
		if !ok || !q.isFloatInit(n.Input[1]) {
			continue
		}
		wname := n.Input[1]
		if keepMatch(n.GetName(), opts.Keep) || keepMatch(wname, opts.Keep) {
			w := q.inits[wname]
			sz := 4 * numel(w.GetDims())
			res.Layers = append(res.Layers, Layer{Name: wname, Shape: dimsInt(w.GetDims()), Format: "fp32 (kept)", BytesBefore: sz, BytesAfter: sz})
			continue
		}
		axis, ok := weightAxis(n, q.inits[wname])
		if !ok {
			continue
		}
		if dq, done := wdq[wname+fmt.Sprint(axis)]; done {
			n.Input[1] = dq
			continue
		}
		w := q.inits[wname]
		vals, err := TensorFloat32(w, q.srcDir)
		if err != nil {
			return nil, err
		}
		qmax := 127
		if opts.ReduceRange {
			qmax = 63
		}
		qdims, format := w.GetDims(), "int8 per-channel (QDQ)"
		if !perChannel {
			qdims, axis, format = []int64{1, numel(w.GetDims())}, 0, fmt.Sprintf("int8 per-tensor (QDQ, opset %d)", opset)
		}
		pc := quantizePerChannel(vals, qdims, axis, qmax)
		qt := addInit(&onnx.TensorProto{Name: proto.String(wname + "_quantized"), DataType: proto.Int32(int32(onnx.TensorProto_INT8)), Dims: w.GetDims(), RawData: int8Bytes(pc.q)})
		var sdims []int64 // per-tensor: scalars, as QuantizeLinear-10 wants
		var axisAttr []*onnx.AttributeProto
		if perChannel {
			sdims, axisAttr = []int64{int64(len(pc.scales))}, []*onnx.AttributeProto{onnx.AttrInt("axis", int64(axis))}
		}
		st := addInit(&onnx.TensorProto{Name: proto.String(wname + "_scale"), DataType: proto.Int32(int32(onnx.TensorProto_FLOAT)), Dims: sdims, RawData: float32Bytes(pc.scales)})
		zt := addInit(&onnx.TensorProto{Name: proto.String(wname + "_zero_point"), DataType: proto.Int32(int32(onnx.TensorProto_INT8)), Dims: sdims, RawData: make([]byte, len(pc.scales))})
		dq := wname + "_dequantized"
		before[i] = append(before[i], &onnx.NodeProto{Name: proto.String(wname + "_DequantizeLinear"), OpType: proto.String("DequantizeLinear"),
			Input: []string{qt, st, zt}, Output: []string{dq}, Attribute: axisAttr})
		wdq[wname+fmt.Sprint(axis)] = dq
		n.Input[1] = dq
		if uses[wname]--; uses[wname] == 0 {
			drop[wname] = true
		}
		sz := 4 * numel(w.GetDims())
		res.Layers = append(res.Layers, Layer{Name: wname, Shape: dimsInt(w.GetDims()), Format: format,
			BytesBefore: sz, BytesAfter: int64(len(pc.q)) + 5*int64(len(pc.scales)), RelRMS: RelativeRMS(vals, pc.dequantize(qdims, axis))})
		// Bias: int32 at scale s_x·s_w[c], zero point 0 (one scalar scale
		// for per-tensor weights). A float bias left beside quantised
		// weights makes ONNX Runtime's QDQ pass insert Round, which opset
		// 10 lacks.
		if len(n.Input) > 2 && q.isFloatInit(n.Input[2]) && n.GetOpType() != "MatMul" {
			b := q.inits[n.Input[2]]
			bv, err := TensorFloat32(b, q.srcDir)
			if err != nil {
				return nil, err
			}
			if perChannel && len(bv) != len(pc.scales) {
				continue
			}
			bs := make([]float32, len(bv))
			bq := make([]int32, len(bv))
			for c, v := range bv {
				bs[c] = xp.scale * pc.scales[min(c, len(pc.scales)-1)]
				if bs[c] > 0 {
					bq[c] = int32(max(min(math.Round(float64(v/bs[c])), math.MaxInt32), math.MinInt32))
				}
			}
			bname := n.Input[2]
			bqt := addInit(&onnx.TensorProto{Name: proto.String(bname + "_quantized"), DataType: proto.Int32(int32(onnx.TensorProto_INT32)), Dims: b.GetDims(), RawData: int32Bytes(bq)})
			bdims, battr := []int64{int64(len(bs))}, []*onnx.AttributeProto{onnx.AttrInt("axis", 0)}
			if !perChannel {
				bs, bdims, battr = bs[:1], nil, nil
			}
			bst := addInit(&onnx.TensorProto{Name: proto.String(bname + "_scale"), DataType: proto.Int32(int32(onnx.TensorProto_FLOAT)), Dims: bdims, RawData: float32Bytes(bs)})
			bzt := addInit(&onnx.TensorProto{Name: proto.String(bname + "_zero_point"), DataType: proto.Int32(int32(onnx.TensorProto_INT32)), Dims: bdims, RawData: make([]byte, 4*len(bs))})
			bdq := bname + "_dequantized_" + fmt.Sprint(i)
			before[i] = append(before[i], &onnx.NodeProto{Name: proto.String(bdq + "_DequantizeLinear"), OpType: proto.String("DequantizeLinear"),
				Input: []string{bqt, bst, bzt}, Output: []string{bdq}, Attribute: battr})
			n.Input[2] = bdq
			if uses[bname]--; uses[bname] == 0 {
				drop[bname] = true
			}
		}
	}
	if len(res.Layers) == 0 {
		return nil, fmt.Errorf("%w: no Conv/ConvTranspose/MatMul/Gemm with a constant float32 weight and a calibrated input", ErrNothingToQuantize)
	}
	nodes := append([]*onnx.NodeProto(nil), after[-1]...)
	for i, n := range g.GetNode() {
		nodes = append(nodes, before[i]...)
		nodes = append(nodes, n)
		nodes = append(nodes, after[i]...)
	}
	g.Node = nodes
	var inits []*onnx.TensorProto
	var total int64
	for _, t := range append(g.GetInitializer(), added...) {
		if drop[t.GetName()] {
			continue
		}
		if t.GetDataLocation() == onnx.TensorProto_EXTERNAL {
			raw, err := tensorBytes(t, q.srcDir)
			if err != nil {
				return nil, err
			}
			t.RawData, t.ExternalData, t.DataLocation = raw, nil, nil
		}
		total += int64(len(t.GetRawData())) + 4*int64(len(t.GetFloatData()))
		inits = append(inits, t)
	}
	if total > 1800<<20 {
		return nil, fmt.Errorf("%w: %d bytes of tensors is too large to keep inline", ErrModel, total)
	}
	g.Initializer = inits
	if perChannel {
		setOpset(q.m, "", 13) // per-channel QuantizeLinear/DequantizeLinear (axis)
	}
	raw, err := proto.Marshal(q.m)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	res.Files = []string{filepath.Base(out)}
	return res, nil
}

// Supported reports whether the model can take QDQ nodes: ErrModel for
// opsets below 10, which have no QuantizeLinear. Call it before
// calibrating, to fail fast.
func (q *QDQModel) Supported() error {
	if op := q.opset(); op < 10 {
		return fmt.Errorf("%w: opset %d has no QuantizeLinear (needs 10; per-channel weights need 13)", ErrModel, op)
	}
	return nil
}

// opset is the model's default-domain opset version.
func (q *QDQModel) opset() int64 {
	for _, o := range q.m.GetOpsetImport() {
		if o.GetDomain() == "" || o.GetDomain() == "ai.onnx" {
			return o.GetVersion()
		}
	}
	return 0
}

// opsetBreaks are the operators whose signature or meaning changed between
// opset 11 and 13 (axes as inputs; Softmax's axis semantics): a model using
// one cannot simply be relabelled opset 13.
var opsetBreaks = []string{"Squeeze", "Unsqueeze", "Split", "ReduceSum", "Softmax", "LogSoftmax", "Hardmax"}

// perChannelOK reports whether per-channel weights (QuantizeLinear-13's
// axis) fit: the model is opset 13+, or opset 11–12 with none of
// opsetBreaks, so relabelling it 13 changes nothing. Older models
// (Clip's attributes, Resize-10, …) get per-tensor weights at their opset.
func (q *QDQModel) perChannelOK(opset int64) bool {
	if opset >= 13 {
		return true
	}
	if opset < 11 {
		return false
	}
	for _, n := range q.m.GetGraph().GetNode() {
		if n.GetDomain() == "" && slices.Contains(opsetBreaks, n.GetOpType()) {
			return false
		}
	}
	return true
}

// actParams are an activation's uint8 scale and zero point.
type actParams struct {
	scale float32
	zp    uint8
}

// activationParams maps r, widened to contain 0, onto uint8 [0, 255].
func activationParams(r Range) actParams {
	lo, hi := min(float64(r.Min), 0), max(float64(r.Max), 0)
	if hi-lo < 1e-12 {
		return actParams{scale: 1}
	}
	scale := (hi - lo) / 255
	zp := math.Round(-lo / scale)
	return actParams{scale: float32(scale), zp: uint8(min(max(zp, 0), 255))}
}

// weightAxis is the output-channel axis of n's weight w: 0 for Conv
// [Cout, Cin/g, k…], 1 for ConvTranspose [Cin, Cout/g, k…] (group 1 only),
// 1 for MatMul [K, N], and for Gemm 0 or 1 by transB.
func weightAxis(n *onnx.NodeProto, w *onnx.TensorProto) (int, bool) {
	r := len(w.GetDims())
	switch n.GetOpType() {
	case "Conv":
		return 0, r >= 3
	case "ConvTranspose":
		return 1, r >= 3 && onnx.IntAttr(n, "group", 1) == 1
	case "MatMul":
		return 1, r == 2
	case "Gemm":
		if onnx.IntAttr(n, "transA", 0) != 0 {
			return 0, false
		}
		if onnx.IntAttr(n, "transB", 0) != 0 {
			return 0, r == 2
		}
		return 1, r == 2
	}
	return 0, false
}

// perChannel is a weight quantised symmetrically to int8 [-qmax, qmax], one
// scale per index of axis.
type perChannel struct {
	q      []int8
	scales []float32
}

// strides returns, for dims and axis, the number of channels, the length
// of one contiguous run of a channel, and how many elements follow axis.
func axisLayout(dims []int64, axis int) (channels, inner int) {
	channels = int(dims[axis])
	inner = 1
	for _, d := range dims[axis+1:] {
		inner *= int(d)
	}
	return channels, inner
}

func quantizePerChannel(w []float32, dims []int64, axis, qmax int) *perChannel {
	c, inner := axisLayout(dims, axis)
	maxAbs := make([]float32, c)
	for i, v := range w {
		ch := (i / inner) % c
		maxAbs[ch] = max(maxAbs[ch], abs32(v))
	}
	pc := &perChannel{q: make([]int8, len(w)), scales: make([]float32, c)}
	for ch, m := range maxAbs {
		pc.scales[ch] = m / float32(qmax)
		if m == 0 {
			pc.scales[ch] = 1
		}
	}
	for i, v := range w {
		s := pc.scales[(i/inner)%c]
		pc.q[i] = int8(min(max(math.Round(float64(v/s)), -float64(qmax)), float64(qmax)))
	}
	return pc
}

func (pc *perChannel) dequantize(dims []int64, axis int) []float32 {
	c, inner := axisLayout(dims, axis)
	out := make([]float32, len(pc.q))
	for i, v := range pc.q {
		out[i] = float32(v) * pc.scales[(i/inner)%c]
	}
	return out
}

// setOpset raises domain's opset import to at least version.
func setOpset(m *onnx.ModelProto, domain string, version int64) {
	for _, o := range m.OpsetImport {
		if o.GetDomain() == domain || (domain == "" && o.GetDomain() == "ai.onnx") {
			if o.GetVersion() < version {
				o.Version = proto.Int64(version)
			}
			return
		}
	}
	m.OpsetImport = append(m.OpsetImport, &onnx.OperatorSetIdProto{Domain: proto.String(domain), Version: proto.Int64(version)})
}

func scalarFloat(name string, v float32) *onnx.TensorProto {
	return &onnx.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnx.TensorProto_FLOAT)), RawData: float32Bytes([]float32{v})}
}

func numel(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

func dimsInt(dims []int64) []int {
	out := make([]int, len(dims))
	for i, d := range dims {
		out[i] = int(d)
	}
	return out
}

func int8Bytes(v []int8) []byte {
	out := make([]byte, len(v))
	for i, x := range v {
		out[i] = byte(x)
	}
	return out
}

func int32Bytes(v []int32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		u := uint32(x)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return out
}

// FoldConstantsFile writes in's model to out with its Constant nodes
// (those holding a tensor) turned into initializers, so that QuantizeFile,
// which looks for weights among initializers, finds the weights of
// exporters that store them as Constants (paddle2onnx). It returns the
// number folded and writes nothing when that is 0 or when the model has
// external data (whose relative locations would not follow it).
func FoldConstantsFile(in, out string) (int, error) {
	q, err := OpenQDQ(in)
	if err != nil {
		return 0, err
	}
	for _, t := range q.m.GetGraph().GetInitializer() {
		if t.GetDataLocation() == onnx.TensorProto_EXTERNAL {
			return 0, nil
		}
	}
	n := len(q.m.GetGraph().GetInitializer()) - q.initialInits
	if n == 0 {
		return 0, nil
	}
	raw, err := proto.Marshal(q.m)
	if err != nil {
		return 0, fmt.Errorf("quant: %w", err)
	}
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return 0, fmt.Errorf("quant: %w", err)
	}
	return n, nil
}
