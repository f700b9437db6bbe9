package platforms

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// ProviderCheck is one execution provider tried on the probe model.
type ProviderCheck struct {
	Provider ort.Provider      `json:"provider"`
	Options  map[string]string `json:"options,omitempty"`
	// Status is "reference" (the CPU run the others are compared with),
	// "passed" (ran, output within Tolerance of the CPU's), "mismatch"
	// (ran, output differs), "failed" (loaded but the run failed) or
	// "skipped" (could not be loaded: Reason says why).
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// MaxAbsDiff is the largest difference from the CPU output.
	MaxAbsDiff *float64 `json:"max_abs_diff,omitempty"`
	Tolerance  float64  `json:"tolerance,omitempty"`
	LoadMS     float64  `json:"load_ms"`
	RunMS      float64  `json:"run_ms,omitempty"`
}

// Probe model: y = tanh(x·W + b), x [1,64], W [64,32]. Small enough to load
// in milliseconds on any provider, large enough that a provider computing
// garbage (a wrong layout, an uninitialised buffer) shows in the output.
const probeIn, probeOut = 64, 32

// ProbeModel returns the probe model's bytes and its input.
func ProbeModel() ([]byte, []float32, error) {
	b := onnx.NewBuilder("edgeinfer-probe")
	x := b.Input("x", onnx.TensorProto_FLOAT, onnx.Fixed(1), onnx.Fixed(probeIn))
	w := make([]float32, probeIn*probeOut)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)*0.37)) * 0.25
	}
	bias := make([]float32, probeOut)
	for i := range bias {
		bias[i] = float32(i%5)*0.1 - 0.2
	}
	h := b.Op("MatMul", []string{x, b.Float32("w", []int64{probeIn, probeOut}, w)})
	h = b.Op("Add", []string{h, b.Float32("b", []int64{probeOut}, bias)})
	b.Node(onnx.DomainONNX, "Tanh", []string{h}, []string{"y"})
	b.Output("y", onnx.TensorProto_FLOAT, onnx.Fixed(1), onnx.Fixed(probeOut))
	model, err := b.Marshal()
	if err != nil {
		return nil, nil, fmt.Errorf("platforms: build probe model: %w", err)
	}
	in := make([]float32, probeIn)
	for i := range in {
		in[i] = float32(math.Cos(float64(i)*0.11)) * 0.5
	}
	return model, in, nil
}

// CheckProviders loads the probe model on the CPU provider, then on each
// other provider of chain alone, runs it, and compares the output with the
// CPU's. A provider that cannot be appended or whose session falls back to
// the CPU is "skipped" with ONNX Runtime's reason. opts carries the
// library path and threads; its Providers are ignored. The error is
// non-nil only when the CPU reference itself cannot run (no library).
func CheckProviders(ctx context.Context, chain []ort.ProviderConfig, opts ort.Options) ([]ProviderCheck, error) {
	model, in, err := ProbeModel()
	if err != nil {
		return nil, err
	}
	opts.Providers = []ort.ProviderConfig{{Name: ort.CPU}}
	opts.DisableHugePages = true
	ref, cpu, err := probeRun(ctx, model, in, opts)
	if err != nil {
		return nil, err
	}
	out := []ProviderCheck{cpu}
	for _, p := range chain {
		if p.Name == ort.CPU {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		o := opts
		o.Providers = []ort.ProviderConfig{p}
		got, c, err := probeRun(ctx, model, in, o)
		c.Provider, c.Options = p.Name, maps.Clone(p.Options)
		switch {
		case errors.Is(err, errFellBack):
			c.Status = "skipped"
		case err != nil:
			c.Status, c.Reason = "failed", err.Error()
		default:
			// fp16 providers (TensorRT with trt_fp16_enable) round to
			// ~1e-3 relative; tanh keeps outputs within [-1, 1].
			c.Tolerance = 1e-4
			if p.Options["trt_fp16_enable"] == "1" {
				c.Tolerance = 1e-2
			}
			d := maxAbsDiff(ref, got)
			c.Status = "passed"
			switch {
			case math.IsNaN(d) || math.IsInf(d, 0):
				c.Status, c.Reason = "mismatch", "output has NaN or the wrong length"
			case d > c.Tolerance:
				c.MaxAbsDiff = &d
				c.Status = "mismatch"
				c.Reason = fmt.Sprintf("output differs from the CPU's by %.3g (tolerance %.g)", d, c.Tolerance)
			default:
				c.MaxAbsDiff = &d
			}
		}
		out = append(out, c)
	}
	return out, nil
}

var errFellBack = errors.New("platforms: provider not used")

// probeRun loads and runs the probe on opts.Providers[0] (then CPU).
func probeRun(ctx context.Context, model []byte, in []float32, opts ort.Options) ([]float32, ProviderCheck, error) {
	want := opts.Providers[0].Name
	c := ProviderCheck{Provider: want}
	start := time.Now()
	s, err := ort.NewSession(ctx, model, opts)
	c.LoadMS = ms(time.Since(start))
	if err != nil {
		c.Reason = err.Error()
		return nil, c, err
	}
	defer s.Close()
	if s.Provider() != want {
		c.Reason = "not used"
		for _, a := range s.ProviderAttempts() {
			if a.Provider == want && !a.Chosen {
				c.Reason = a.Reason
				if a.Err != nil && a.Reason != a.Err.Error() {
					c.Reason += " (" + firstLineOf(a.Err.Error()) + ")"
				}
			}
		}
		return nil, c, errFellBack
	}
	x, err := ort.CopyTensor([]int64{1, probeIn}, in)
	if err != nil {
		return nil, c, err
	}
	defer x.Close()
	start = time.Now()
	res, err := s.Run(ctx, map[string]*ort.Tensor{"x": x})
	c.RunMS = ms(time.Since(start))
	if err != nil {
		return nil, c, err
	}
	defer ort.CloseAll(res)
	y, err := ort.Data[float32](res["y"])
	if err != nil {
		return nil, c, err
	}
	c.Status = "reference"
	return append([]float32(nil), y...), c, nil
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		x := math.Abs(float64(a[i] - b[i]))
		if x > d || math.IsNaN(x) {
			d = x
		}
	}
	return d
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func firstLineOf(s string) string {
	for i := range len(s) {
		if s[i] == '\n' {
			s = s[:i]
			break
		}
	}
	if len(s) > 240 {
		s = s[:240] + "..."
	}
	return s
}
