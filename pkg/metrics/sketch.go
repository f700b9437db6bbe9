package metrics

import (
	"errors"
	"fmt"
	"math"
)

// Sketch is a Histogram as plain data, to send it to another process and
// merge it there: the cloud link ships each interval's sketches so a fleet
// can compute fleet-wide quantiles exactly as one histogram would (a p99
// of per-device p99s is not a p99). Counts are dense from bucket Offset.
type Sketch struct {
	RelErr float64  `json:"rel_err"`
	Offset int      `json:"offset"`
	Counts []uint64 `json:"counts"`
	Zero   uint64   `json:"zero,omitempty"`
	Count  uint64   `json:"count"`
	Sum    float64  `json:"sum"`
	Min    float64  `json:"min"`
	Max    float64  `json:"max"`
}

// maxSketchBuckets bounds a decoded sketch: latencies from 1 µs to a day
// at 0.5 % relative error span about 2,500 buckets.
const maxSketchBuckets = 1 << 14

var errSketch = errors.New("metrics: bad sketch")

// Sketch returns h as plain data.
func (h *Histogram) Sketch() Sketch {
	return Sketch{RelErr: h.alpha, Offset: h.offset, Counts: append([]uint64(nil), h.counts...), Zero: h.zero,
		Count: h.count, Sum: h.sum, Min: h.min, Max: h.max}
}

// Histogram rebuilds the histogram, checking the sketch is consistent (it
// may come from another machine): accuracy in (0, 1), counts adding up,
// a bounded number of buckets, finite figures.
func (s Sketch) Histogram() (*Histogram, error) {
	if !(s.RelErr > 0 && s.RelErr < 1) {
		return nil, fmt.Errorf("%w: rel_err %v not in (0, 1)", errSketch, s.RelErr)
	}
	if len(s.Counts) > maxSketchBuckets || s.Offset < -maxSketchBuckets*64 || s.Offset > maxSketchBuckets*64 {
		return nil, fmt.Errorf("%w: %d buckets from %d", errSketch, len(s.Counts), s.Offset)
	}
	n := s.Zero
	for _, c := range s.Counts {
		if n+c < n {
			return nil, fmt.Errorf("%w: counts overflow", errSketch)
		}
		n += c
	}
	if n != s.Count {
		return nil, fmt.Errorf("%w: buckets hold %d values, count says %d", errSketch, n, s.Count)
	}
	for _, v := range []float64{s.Sum, s.Min, s.Max} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: sum/min/max not finite", errSketch)
		}
	}
	if s.Count > 0 && s.Min > s.Max {
		return nil, fmt.Errorf("%w: min %v above max %v", errSketch, s.Min, s.Max)
	}
	h := NewHistogram(s.RelErr)
	h.offset, h.counts, h.zero, h.count, h.sum, h.min, h.max = s.Offset, append([]uint64(nil), s.Counts...), s.Zero, s.Count, s.Sum, s.Min, s.Max
	return h, nil
}
