package loadgen

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

// SweepPoint is one trial of the sweep: the load it ran and what it got.
// The points, sorted by load, are the throughput–latency curve.
type SweepPoint struct {
	Load           float64  `json:"load"`
	Requests       int      `json:"requests"`
	ThroughputTokS *float64 `json:"throughput_tok_s"`
	GoodputTokS    *float64 `json:"goodput_tok_s"`
	SLOAttainment  *float64 `json:"slo_attainment"`
	TTFTP50        *float64 `json:"ttft_p50_ms"`
	TTFTP99        *float64 `json:"ttft_p99_ms"`
	TPOTP99        *float64 `json:"tpot_p99_ms"`
	ITLP99         *float64 `json:"itl_p99_ms"`
	// StartS and EndS place the trial (its drain included) in the run,
	// in seconds, for the timeline.
	StartS float64 `json:"start_s"`
	EndS   float64 `json:"end_s"`
	Stable bool    `json:"stable"`
	// Why says which criterion failed on an unstable point.
	Why string `json:"why,omitempty"`
}

// SweepResult is the sweep's outcome. MaxStable is the highest stable
// load found, nil when even the lowest load failed.
type SweepResult struct {
	Mode      string       `json:"mode"`
	Criteria  []string     `json:"criteria"`
	Trial     Duration     `json:"trial"`
	Points    []SweepPoint `json:"points"`
	MaxStable *float64     `json:"max_stable"`
	// Bounded is true when the search hit Max while still stable: the
	// true limit may be higher.
	Bounded bool `json:"bounded"`
	// LowerBound is true when no trial was unstable, whatever stopped
	// the search (Max, or max_trials): MaxStable is then only a lower
	// bound of the limit ("≥ 8"), and Stopped says why the search ended.
	LowerBound bool   `json:"lower_bound"`
	Stopped    string `json:"stopped"`
}

// MaxStableText is the highest stable load as a reader should take it:
// "8", "≥ 8 (ran out of trials …)", or "none".
func (s *SweepResult) MaxStableText() string {
	if s.MaxStable == nil {
		return "none: even the lowest load failed"
	}
	v := fmt.Sprintf("%g", *s.MaxStable)
	if s.Mode == "rate" {
		v = fmt.Sprintf("%.2f req/s", *s.MaxStable)
	}
	if s.LowerBound {
		return "≥ " + v + " (" + s.Stopped + ")"
	}
	return v
}

// sweep doubles the load from Min until a trial fails (or Max), then
// bisects between the last stable and the first unstable load.
func (r *runner) sweep(ctx context.Context) (*SweepResult, error) {
	w := *r.spec.Sweep
	maxTrials := w.MaxTrials
	if maxTrials == 0 {
		maxTrials = 8
	}
	minAtt := w.MinAttainment
	if minAtt == 0 {
		minAtt = 0.9
	}
	res := w.Resolution
	if res == 0 {
		res = 1
		if w.Mode == "rate" {
			res = w.Min * 0.05
		}
	}
	out := &SweepResult{Mode: w.Mode, Trial: w.Trial, Criteria: r.sweepCriteria(minAtt)}
	err := search(w, maxTrials, res, out, func(load float64) (SweepPoint, error) { return r.trial(ctx, w, load, minAtt) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// search is the sweep's search over loads, out.Points collecting what
// trial measured; it says in out whether the figure is a limit or a
// lower bound, and why it stopped.
func search(w Sweep, maxTrials int, res float64, out *SweepResult, run func(load float64) (SweepPoint, error)) error {
	round := func(v float64) float64 {
		if w.Mode == "concurrency" {
			return math.Round(v)
		}
		return v
	}
	trial := func(load float64) (bool, error) {
		p, err := run(load)
		if err != nil {
			return false, err
		}
		out.Points = append(out.Points, p)
		return p.Stable, nil
	}
	lo, hi := math.NaN(), math.NaN() // last stable, first unstable
	for load := w.Min; len(out.Points) < maxTrials; load = min(round(load*2), w.Max) {
		ok, err := trial(load)
		if err != nil {
			return err
		}
		if !ok {
			hi = load
			break
		}
		lo = load
		if load >= w.Max {
			out.Bounded = true
			break
		}
	}
	for !math.IsNaN(lo) && !math.IsNaN(hi) && hi-lo > res && len(out.Points) < maxTrials {
		mid := round((lo + hi) / 2)
		if mid <= lo || mid >= hi {
			break
		}
		ok, err := trial(mid)
		if err != nil {
			return err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	if !math.IsNaN(lo) {
		out.MaxStable = &lo
	}
	switch {
	case math.IsNaN(lo) && !math.IsNaN(hi):
		out.Stopped = fmt.Sprintf("the lowest load (%g) was already unstable", hi)
	case !math.IsNaN(hi):
		out.Stopped = fmt.Sprintf("bracketed between %g (stable) and %g (unstable) in %d trials", lo, hi, len(out.Points))
	case out.Bounded:
		out.LowerBound = true
		out.Stopped = fmt.Sprintf("still stable at the sweep's max %g: raise sweep.max to find the limit", w.Max)
	case !math.IsNaN(lo):
		out.LowerBound = true
		out.Stopped = fmt.Sprintf("ran out of trials (max_trials %d) while still stable: raise sweep.max_trials to find the limit", maxTrials)
	}
	return nil
}

// trial runs one closed-loop concurrency or Poisson rate for w.Trial and
// judges it against the run-wide latency thresholds and the attainment.
func (r *runner) trial(ctx context.Context, w Sweep, load, minAtt float64) (SweepPoint, error) {
	r.stage.Store(fmt.Sprintf("sweep %s=%g", w.Mode, load))
	tctx, cancel := context.WithCancel(ctx)
	start := time.Now()
	acc := metrics.NewAccumulator(metrics.SummaryOptions{})
	r.col.add(sink{start: start, acc: acc, phase: -1})
	if w.Mode == "concurrency" {
		r.closed(ctx, tctx, start, w.Trial.D(), int(load), int(load))
	} else {
		r.poisson(ctx, tctx, start, w.Trial.D(), load, load)
	}
	if err := r.drain(ctx, cancel); err != nil {
		return SweepPoint{}, err
	}
	r.settle()
	sum := acc.Summary()
	p := SweepPoint{Load: load, Requests: sum.Requests, ThroughputTokS: sum.ThroughputTokS,
		GoodputTokS: sum.GoodputTokS, SLOAttainment: sum.SLOAttainment,
		TTFTP50: sum.TTFTMs.P50, TTFTP99: sum.TTFTMs.P99, TPOTP99: sum.TPOTMs.P99, ITLP99: sum.ITLMs.P99, Stable: true,
		StartS: start.Sub(r.start).Seconds(), EndS: time.Since(r.start).Seconds()}
	if sum.SLOAttainment == nil || *sum.SLOAttainment < minAtt {
		p.Stable = false
		p.Why = fmt.Sprintf("slo_attainment %s < %g", fmtPtr(sum.SLOAttainment, 3), minAtt)
		return p, nil
	}
	for _, t := range r.spec.Thresholds {
		if t.Phase != "" || t.Metric == "energy_j_per_token" {
			continue
		}
		v, _, _ := metricValue(&sum, t.Metric, nil)
		if v == nil {
			continue
		}
		if reason := violates(t, *v); reason != "" {
			p.Stable = false
			p.Why = reason
			return p, nil
		}
	}
	return p, nil
}

func (r *runner) sweepCriteria(minAtt float64) []string {
	c := []string{fmt.Sprintf("slo_attainment ≥ %g", minAtt)}
	for _, t := range r.spec.Thresholds {
		if t.Phase == "" && t.Metric != "energy_j_per_token" {
			c = append(c, t.String())
		}
	}
	return c
}
