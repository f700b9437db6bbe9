//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// Static int8 (QDQ) quantisation of one-shot models and their quality
// report: quant prepares the graph and does the arithmetic, this file runs
// the models (quant does not import the runtime).

// oneShotFlags are quantize's flags for one-shot .onnx models.
type oneShotFlags struct {
	calibrate  string
	method     string
	percentile float64
	size       int
	runs       int
	// reduceRange: 7-bit weights, for ONNX Runtime's x86 kernels without
	// VNNI (see quant.QDQOptions.ReduceRange).
	reduceRange bool
}

// ortRunner is quant.Runner over an ONNX Runtime session. Safe for
// concurrent use, as the session is.
type ortRunner struct{ s *ort.Session }

func (r ortRunner) Run(ctx context.Context, inputs map[string]quant.Tensor, outputs []string) (map[string]quant.Tensor, error) {
	feed := make(map[string]*ort.Tensor, len(inputs))
	defer func() { _ = ort.CloseAll(feed) }()
	for name, t := range inputs {
		x, err := ort.CopyTensor(t.Shape, t.Data)
		if err != nil {
			return nil, err
		}
		feed[name] = x
	}
	res, err := r.s.Run(ctx, feed)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ort.CloseAll(res) }()
	out := make(map[string]quant.Tensor, len(outputs))
	for _, name := range outputs {
		t, ok := res[name]
		if !ok {
			return nil, fmt.Errorf("model has no output %q", name)
		}
		d, err := ort.Data[float32](t)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", name, err)
		}
		out[name] = quant.Tensor{Shape: slices.Clone(t.Shape()), Data: slices.Clone(d)}
	}
	return out, nil
}

// loadOneShotSamples reads the calibration directory for the model's one
// float32 input.
func loadOneShotSamples(model string, f oneShotFlags) (*quant.QDQModel, []quant.Sample, error) {
	qm, err := quant.OpenQDQ(model)
	if err != nil {
		return nil, nil, err
	}
	ins := qm.Inputs()
	if len(ins) != 1 {
		return nil, nil, fmt.Errorf("%w: %s has %d inputs; calibration feeds models with one", quant.ErrCalibration, model, len(ins))
	}
	samples, err := quant.LoadSamples(f.calibrate, ins[0], quant.ImageOptions{Size: f.size})
	if err != nil {
		return nil, nil, err
	}
	return qm, samples, nil
}

// runQuantizeQDQ calibrates on --calibrate, writes the QDQ model and, with
// report, compares it with the fp32 model on the same samples.
func runQuantizeQDQ(ctx context.Context, stdout io.Writer, in, out string, keep []string, f oneShotFlags, report, table bool, threads int) error {
	start := time.Now()
	if f.calibrate == "" {
		return fmt.Errorf("%w: --scheme %s needs --calibrate DIR (images or .npy float32 tensors)", errUsage, quant.QDQScheme)
	}
	cal, err := quant.NewCalibrator(f.method, f.percentile)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	qm, samples, err := loadOneShotSamples(in, f)
	if err != nil {
		return err
	}
	if err := qm.Supported(); err != nil {
		return err
	}
	if qm.OpsetNote != "" {
		fmt.Fprintln(stdout, "model:", qm.OpsetNote)
	}
	calModel, err := qm.CalibrationModel()
	if err != nil {
		return err
	}
	sess, err := ort.NewSession(ctx, calModel, ort.Options{IntraOpThreads: threads})
	if err != nil {
		return err
	}
	err = quant.Calibrate(ctx, ortRunner{sess}, qm.Targets, samples, cal)
	if cerr := sess.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	name := qm.Inputs()[0].Name
	fmt.Fprintf(stdout, "calibration: %d samples %v of %s, %s, %d activations\n", len(samples), quant.SampleShapes(samples, name), name, cal.Method(), len(qm.Targets))
	res, err := qm.QuantizeQDQ(ctx, out, quant.QDQOptions{Ranges: cal.Ranges(), Keep: keep, ReduceRange: f.reduceRange})
	if err != nil {
		return noOp(stdout, err)
	}
	if err := printQuantized(stdout, res.Scheme, res.Layers, table, start); err != nil {
		return err
	}
	if !report {
		return nil
	}
	return compareOneShot(ctx, stdout, in, out, samples, threads, f.runs)
}

// compareOneShot runs the reference and the quantised model on the same
// samples and prints output cosine similarity, box agreement for
// probability maps ([N,1,H,W]), file sizes and run latency.
func compareOneShot(ctx context.Context, stdout io.Writer, refPath, qPath string, samples []quant.Sample, threads, runs int) error {
	type stats struct {
		outs []string
		res  []map[string]quant.Tensor
		p50  time.Duration
	}
	run := func(path string) (*stats, error) {
		s, err := ort.NewSessionFromFile(ctx, path, ort.Options{IntraOpThreads: threads})
		if err != nil {
			return nil, err
		}
		defer s.Close()
		st := &stats{}
		for _, o := range s.Outputs() {
			if o.DType == ort.DTypeOf[float32]() {
				st.outs = append(st.outs, o.Name)
			}
		}
		r := ortRunner{s}
		for _, smp := range samples {
			out, err := r.Run(ctx, smp.Inputs, st.outs)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", smp.Name, err)
			}
			st.res = append(st.res, out)
		}
		// Latency on the first sample, after the runs above warmed up.
		var lat []time.Duration
		for range max(runs, 1) {
			t0 := time.Now()
			if _, err := r.Run(ctx, samples[0].Inputs, st.outs); err != nil {
				return nil, err
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		st.p50 = lat[len(lat)/2]
		return st, s.Close()
	}
	ref, err := run(refPath)
	if err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	q, err := run(qPath)
	if err != nil {
		return fmt.Errorf("quantised: %w", err)
	}
	for _, name := range ref.outs {
		// Pooled over every sample's values: a map with no text is ~0
		// everywhere and its own cosine measures only noise, so the
		// per-sample figure is printed beside, not instead.
		var pa, pb []float32
		var worst float64 = 1
		worstName := ""
		var per []string
		var nRef, nQ, nMatch int
		maps := false
		for i := range samples {
			a, b := ref.res[i][name], q.res[i][name]
			pa, pb = append(pa, a.Data...), append(pb, b.Data...)
			c := quant.Cosine(a.Data, b.Data)
			if c < worst {
				worst, worstName = c, samples[i].Name
			}
			per = append(per, fmt.Sprintf("%s %.4f", samples[i].Name, c))
			if sh := a.Shape; len(sh) == 4 && sh[0] == 1 && sh[1] == 1 {
				maps = true
				h, w := int(sh[2]), int(sh[3])
				rb := quant.MapBoxes(a.Data, h, w, 0.3, 10)
				qb := quant.MapBoxes(b.Data, h, w, 0.3, 10)
				nRef, nQ, nMatch = nRef+len(rb), nQ+len(qb), nMatch+quant.MatchBoxes(rb, qb, 0.5)
			}
		}
		fmt.Fprintf(stdout, "cosine %s: %.5f pooled over %d samples; lowest per sample %.5f (%s)\n", name, quant.Cosine(pa, pb), len(samples), worst, worstName)
		fmt.Fprintf(stdout, "  per sample: %s\n", strings.Join(per, ", "))
		if maps {
			fmt.Fprintf(stdout, "boxes %s (threshold 0.3, IoU ≥ 0.5): reference %d quantised %d matched %d; precision %.3f recall %.3f\n",
				name, nRef, nQ, nMatch, ratio(nMatch, nQ), ratio(nMatch, nRef))
		}
	}
	rs, qs := fileBytes(refPath), fileBytes(qPath)
	fmt.Fprintf(stdout, "size: reference %d B quantised %d B (%.3f×)\n", rs, qs, float64(qs)/float64(max(rs, 1)))
	fmt.Fprintf(stdout, "latency p50 over %d runs, %d threads, input %v: reference %.1f ms quantised %.1f ms (%.2f× faster)\n",
		max(runs, 1), threads, samples[0].Inputs[firstKey(samples[0].Inputs)].Shape,
		ms(ref.p50), ms(q.p50), float64(ref.p50)/float64(max(q.p50, 1)))
	return nil
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// fileBytes is the size of a model file plus its external data file, if
// any (MODEL.data beside it).
func fileBytes(path string) int64 {
	var n int64
	for _, p := range []string{path, path + ".data"} {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		} else if !errors.Is(err, os.ErrNotExist) {
			return -1
		}
	}
	return n
}

func firstKey(m map[string]quant.Tensor) string {
	for k := range m {
		return k
	}
	return ""
}
