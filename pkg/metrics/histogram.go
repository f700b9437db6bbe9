package metrics

import (
	"fmt"
	"math"
)

// DefaultRelativeError is the relative accuracy of NewHistogram(0): every
// quantile it returns is within 0.5 % of the exact order statistic.
const DefaultRelativeError = 0.005

// minPositive is the smallest value given its own bucket; smaller
// non-negative values share the zero bucket. Latencies in milliseconds or
// seconds are many orders of magnitude above it.
const minPositive = 1e-9

// Histogram is a mergeable log-bucketed histogram (the DDSketch scheme):
// bucket i holds values in (γ^(i−1), γ^i] with γ = (1+α)/(1−α), and reports
// 2γ^i/(γ+1), which is within relative error α of every value in the
// bucket. Count, sum, min and max are exact. Merging two histograms of the
// same accuracy gives exactly the histogram of the union.
//
// A Histogram is not safe for concurrent use; Recorder guards its own.
type Histogram struct {
	alpha    float64
	gamma    float64
	logGamma float64
	offset   int      // bucket index of counts[0]
	counts   []uint64 // dense buckets from offset
	zero     uint64   // values below minPositive (negatives clamp here)
	count    uint64
	sum      float64
	min, max float64
}

// NewHistogram returns an empty histogram with relative accuracy relErr
// (0 < relErr < 1); relErr ≤ 0 selects DefaultRelativeError.
func NewHistogram(relErr float64) *Histogram {
	if relErr <= 0 || relErr >= 1 {
		relErr = DefaultRelativeError
	}
	g := (1 + relErr) / (1 - relErr)
	return &Histogram{alpha: relErr, gamma: g, logGamma: math.Log(g)}
}

// RelativeError returns the histogram's accuracy α.
func (h *Histogram) RelativeError() float64 { return h.alpha }

// Record adds one value. NaN is ignored; negative values and values below
// 1e-9 are counted in the zero bucket (their min is still exact).
func (h *Histogram) Record(v float64) {
	if math.IsNaN(v) {
		return
	}
	if math.IsInf(v, 1) {
		v = math.MaxFloat64
	}
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if h.count == 0 || v > h.max {
		h.max = v
	}
	h.count++
	h.sum += v
	if v < minPositive {
		h.zero++
		return
	}
	i := int(math.Ceil(math.Log(v) / h.logGamma))
	h.grow(i)
	h.counts[i-h.offset]++
}

// grow makes bucket i addressable.
func (h *Histogram) grow(i int) {
	if len(h.counts) == 0 {
		h.offset = i
		h.counts = make([]uint64, 1, 64)
		return
	}
	if i < h.offset {
		n := make([]uint64, h.offset-i+len(h.counts), h.offset-i+len(h.counts)+32)
		copy(n[h.offset-i:], h.counts)
		h.counts, h.offset = n, i
		return
	}
	if j := i - h.offset; j >= len(h.counts) {
		h.counts = append(h.counts, make([]uint64, j-len(h.counts)+1)...)
	}
}

// Merge adds every value recorded in o to h. o is unchanged.
func (h *Histogram) Merge(o *Histogram) error {
	if o == nil || o.count == 0 {
		return nil
	}
	if o.alpha != h.alpha {
		return fmt.Errorf("merge α=%g into α=%g: %w", o.alpha, h.alpha, ErrMergeMismatch)
	}
	if h.count == 0 || o.min < h.min {
		h.min = o.min
	}
	if h.count == 0 || o.max > h.max {
		h.max = o.max
	}
	h.count += o.count
	h.sum += o.sum
	h.zero += o.zero
	if len(o.counts) > 0 {
		h.grow(o.offset)
		h.grow(o.offset + len(o.counts) - 1)
		for j, c := range o.counts {
			h.counts[o.offset+j-h.offset] += c
		}
	}
	return nil
}

// Clone returns an independent copy.
func (h *Histogram) Clone() *Histogram {
	c := *h
	c.counts = append([]uint64(nil), h.counts...)
	return &c
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.count }

// Sum returns the exact sum of recorded values.
func (h *Histogram) Sum() float64 { return h.sum }

// Min returns the smallest value; ok is false when empty.
func (h *Histogram) Min() (v float64, ok bool) { return h.min, h.count > 0 }

// Max returns the largest value; ok is false when empty.
func (h *Histogram) Max() (v float64, ok bool) { return h.max, h.count > 0 }

// Mean returns sum/count; ok is false when empty.
func (h *Histogram) Mean() (v float64, ok bool) {
	if h.count == 0 {
		return 0, false
	}
	return h.sum / float64(h.count), true
}

// Quantile returns an estimate of the nearest-rank q-quantile (the
// ⌈q·n⌉-th smallest value, q in [0, 1]) within the histogram's relative
// error; ok is false when empty or q is out of range.
func (h *Histogram) Quantile(q float64) (v float64, ok bool) {
	if h.count == 0 || !(q >= 0 && q <= 1) {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(h.count)))
	rank = min(max(rank, 1), h.count)
	seen := h.zero
	if rank <= seen {
		return h.min, true // the zero bucket holds only values ≤ 1e-9; min is exact
	}
	for j, c := range h.counts {
		seen += c
		if rank <= seen {
			est := 2 * math.Pow(h.gamma, float64(h.offset+j)) / (h.gamma + 1)
			return min(max(est, h.min), h.max), true
		}
	}
	return h.max, true
}
