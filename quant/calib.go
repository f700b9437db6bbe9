package quant

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Tensor is a float32 tensor crossing the Runner boundary: a row-major
// value with its shape. It is plain data.
type Tensor struct {
	Shape []int64
	Data  []float32
}

// Runner runs a model on named inputs and returns the named outputs. The
// CLI implements it with runtime/ort (this package does not import the
// runtime); Calibrate gives it the calibration model (CalibrationModel),
// whose extra graph outputs are the activations to measure.
type Runner interface {
	Run(ctx context.Context, inputs map[string]Tensor, outputs []string) (map[string]Tensor, error)
}

// Sample is one calibration input set, named for error messages.
type Sample struct {
	Name   string
	Inputs map[string]Tensor
}

// Range is a calibrated activation range. QuantizeQDQ widens it to contain
// 0, so zero is exactly representable (padding, ReLU).
type Range struct {
	Min, Max float32
}

// Calibration methods.
const (
	// MethodMinMax takes each tensor's observed minimum and maximum over
	// every sample: nothing clips, outliers cost resolution.
	MethodMinMax = "minmax"
	// MethodPercentile takes the Percentile-th percentile of each tail from
	// a histogram over every sample: rare outliers clip, the bulk keeps
	// resolution.
	MethodPercentile = "percentile"
)

// DefaultPercentile is the percentile MethodPercentile uses when none is
// given (ONNX Runtime's default too).
const DefaultPercentile = 99.999

// histBins is the resolution of the percentile histogram: 1/4096 of the
// widest magnitude seen.
const histBins = 4096

// Calibrator accumulates activation statistics over samples. It is not
// safe for concurrent use.
type Calibrator struct {
	method     string
	percentile float64
	stats      map[string]*tensorStats
}

// NewCalibrator returns a calibrator for MethodMinMax or MethodPercentile
// (percentile in (50, 100]; 0 means DefaultPercentile).
func NewCalibrator(method string, percentile float64) (*Calibrator, error) {
	switch method {
	case MethodMinMax, "":
		method = MethodMinMax
	case MethodPercentile:
		if percentile == 0 {
			percentile = DefaultPercentile
		}
		if !(percentile > 50 && percentile <= 100) {
			return nil, fmt.Errorf("%w: percentile %g (want 50 < p ≤ 100)", ErrCalibration, percentile)
		}
	default:
		return nil, fmt.Errorf("%w: method %q (want minmax or percentile)", ErrCalibration, method)
	}
	return &Calibrator{method: method, percentile: percentile, stats: map[string]*tensorStats{}}, nil
}

// Method is the calibrator's method name, with its percentile.
func (c *Calibrator) Method() string {
	if c.method == MethodPercentile {
		return fmt.Sprintf("%s %g", c.method, c.percentile)
	}
	return c.method
}

// Observe adds one tensor's values.
func (c *Calibrator) Observe(name string, data []float32) {
	s, ok := c.stats[name]
	if !ok {
		s = &tensorStats{min: float32(math.Inf(1)), max: float32(math.Inf(-1))}
		c.stats[name] = s
	}
	s.observe(data, c.method == MethodPercentile)
}

// Ranges returns the range of every observed tensor.
func (c *Calibrator) Ranges() map[string]Range {
	out := make(map[string]Range, len(c.stats))
	for name, s := range c.stats {
		if s.n == 0 {
			continue
		}
		r := Range{Min: s.min, Max: s.max}
		if c.method == MethodPercentile {
			lo, hi := s.quantile(1-c.percentile/100), s.quantile(c.percentile/100)
			r = Range{Min: max(lo, s.min), Max: min(hi, s.max)}
		}
		out[name] = r
	}
	return out
}

// tensorStats is one tensor's running minimum, maximum and, for
// percentiles, a histogram over [-limit, limit] whose limit doubles (merging
// bin pairs) when a larger magnitude arrives, so no sample is kept.
type tensorStats struct {
	min, max float32
	n        int64
	limit    float64
	bins     []int64
}

func (s *tensorStats) observe(data []float32, hist bool) {
	var peak float64
	for _, v := range data {
		if v != v { // NaN: not a range
			continue
		}
		s.min, s.max = min(s.min, v), max(s.max, v)
		peak = max(peak, math.Abs(float64(v)))
	}
	s.n += int64(len(data))
	if !hist {
		return
	}
	if s.bins == nil {
		s.bins = make([]int64, histBins)
		s.limit = max(peak, 1e-12)
	}
	for peak > s.limit {
		s.grow()
	}
	w := 2 * s.limit / histBins
	for _, v := range data {
		if v != v {
			continue
		}
		i := int((float64(v) + s.limit) / w)
		s.bins[min(max(i, 0), histBins-1)]++
	}
}

// grow doubles the histogram's limit: the old bins land, pairwise merged,
// in the middle half.
func (s *tensorStats) grow() {
	nb := make([]int64, histBins)
	for i, c := range s.bins {
		nb[histBins/4+i/2] += c
	}
	s.bins, s.limit = nb, 2*s.limit
}

// quantile is the value below which a fraction q of the histogram lies
// (bin centre).
func (s *tensorStats) quantile(q float64) float32 {
	var total int64
	for _, c := range s.bins {
		total += c
	}
	target := int64(math.Ceil(q * float64(total)))
	w := 2 * s.limit / histBins
	var acc int64
	for i, c := range s.bins {
		acc += c
		if acc >= max(target, 1) {
			return float32(-s.limit + (float64(i)+0.5)*w)
		}
	}
	return float32(s.limit)
}

// Calibrate runs every sample through r, asking for targets, and feeds the
// values to c. A sample whose run fails stops calibration with the
// sample's name.
func Calibrate(ctx context.Context, r Runner, targets []string, samples []Sample, c *Calibrator) error {
	if len(samples) == 0 {
		return fmt.Errorf("%w: no samples", ErrCalibration)
	}
	for _, s := range samples {
		if err := ctx.Err(); err != nil {
			return err
		}
		out, err := r.Run(ctx, s.Inputs, targets)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCalibration, s.Name, err)
		}
		names := make([]string, 0, len(out))
		for name := range out {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if slices.Contains(targets, name) {
				c.Observe(name, out[name].Data)
			}
		}
	}
	return nil
}
