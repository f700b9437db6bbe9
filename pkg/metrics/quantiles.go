package metrics

import "time"

// Quantiles is the JSON form of a distribution. Every statistic is a
// pointer so that an empty distribution encodes as null, never NaN; Count
// lets a verdict say "too few samples".
type Quantiles struct {
	Count uint64   `json:"count"`
	Min   *float64 `json:"min"`
	Mean  *float64 `json:"mean"`
	P50   *float64 `json:"p50"`
	P90   *float64 `json:"p90"`
	P95   *float64 `json:"p95"`
	P99   *float64 `json:"p99"`
	P999  *float64 `json:"p999"`
	Max   *float64 `json:"max"`
}

// QuantilesOf summarises h; a nil or empty h gives Count 0 and nulls.
func QuantilesOf(h *Histogram) Quantiles {
	if h == nil || h.Count() == 0 {
		return Quantiles{}
	}
	q := func(p float64) *float64 { v, _ := h.Quantile(p); return &v }
	mn, _ := h.Min()
	mx, _ := h.Max()
	mean, _ := h.Mean()
	return Quantiles{
		Count: h.Count(), Min: &mn, Mean: &mean, Max: &mx,
		P50: q(0.50), P90: q(0.90), P95: q(0.95), P99: q(0.99), P999: q(0.999),
	}
}

// ms converts a duration to float64 milliseconds, the unit of reports.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ptr returns a pointer to v, for optional JSON numbers.
func ptr(v float64) *float64 { return &v }

// ratio returns a/b, or nil when b is zero (no NaN, no Inf).
func ratio(a, b float64) *float64 {
	if b == 0 {
		return nil
	}
	return ptr(a / b)
}
