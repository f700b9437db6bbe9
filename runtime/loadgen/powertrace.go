package loadgen

import (
	"fmt"
	"slices"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/power"
)

// maxTracePoints bounds each trace in report.json and in the charts: a
// 20 Hz sampler over a minute gives 1,200 samples, more than a 1,000 px
// chart can show and more than a report needs.
const maxTracePoints = 300

// PowerReport is report.json's "power": pkg/power's report (energy, idle
// baseline, sources, unavailable reasons, thermal extremes) with the
// run's power and temperature traces, downsampled, for the timeline.
type PowerReport struct {
	power.Report
	// TraceW is the primary source's power in W (null without a sensor);
	// a sensor gap is a hole, not an interpolated line.
	TraceW []TracePoint `json:"trace_w"`
	// TempC is the hottest thermal zone's temperature in °C (null without
	// a thermal zone).
	TempC []TracePoint `json:"temp_c"`
}

// TracePoint is a point of a downsampled trace, T seconds into the run.
type TracePoint struct {
	T float64 `json:"t_s"`
	V float64 `json:"v"`
}

// downsample turns a sampler trace into at most n points relative to
// start: the samples falling into each of n equal time buckets over
// [start, end] are averaged. An empty bucket emits nothing, so the gaps
// the sampler left (a vanished file, a counter reset) stay gaps.
func downsample(tr []power.TracePoint, start, end time.Time, n int) []TracePoint {
	if len(tr) == 0 {
		return nil
	}
	span := end.Sub(start)
	if len(tr) <= n || span <= 0 {
		out := make([]TracePoint, 0, len(tr))
		for _, p := range tr {
			out = append(out, TracePoint{T: p.T.Sub(start).Seconds(), V: p.V})
		}
		return out
	}
	type acc struct {
		t, v float64
		k    int
	}
	buckets := make([]acc, n)
	for _, p := range tr {
		off := p.T.Sub(start)
		i := min(max(int(int64(off)*int64(n)/int64(span)), 0), n-1)
		buckets[i].t += off.Seconds()
		buckets[i].v += p.V
		buckets[i].k++
	}
	var out []TracePoint
	for _, b := range buckets {
		if b.k > 0 {
			out = append(out, TracePoint{T: b.t / float64(b.k), V: b.v / float64(b.k)})
		}
	}
	return out
}

// segments splits a trace where consecutive points are more than three
// typical (median) spacings apart, so a chart draws a sensor gap as a
// hole.
func segments(tr []TracePoint) [][][2]float64 {
	if len(tr) == 0 {
		return nil
	}
	var gaps []float64
	for i := 1; i < len(tr); i++ {
		gaps = append(gaps, tr[i].T-tr[i-1].T)
	}
	limit := 0.0
	if len(gaps) > 0 {
		s := slices.Clone(gaps)
		slices.Sort(s)
		limit = 3 * s[len(s)/2]
	}
	var out [][][2]float64
	cur := [][2]float64{{tr[0].T, tr[0].V}}
	for i := 1; i < len(tr); i++ {
		if limit > 0 && tr[i].T-tr[i-1].T > limit {
			out = append(out, cur)
			cur = nil
		}
		cur = append(cur, [2]float64{tr[i].T, tr[i].V})
	}
	return append(out, cur)
}

// traceRange returns the y range for a trace chart: from a little below
// its minimum (never under zero for non-negative data) to a little above
// its maximum, so a flat line sits inside the plot, not on its frame.
func traceRange(tr []TracePoint) (lo, hi float64) {
	lo, hi = tr[0].V, tr[0].V
	for _, p := range tr {
		lo, hi = min(lo, p.V), max(hi, p.V)
	}
	pad := max((hi-lo)*0.1, max(hi*0.05, 0.5))
	lo, hi = lo-pad, hi+pad
	if tr[0].V >= 0 && lo < 0 {
		lo = 0
	}
	return lo, hi
}

// powerChart draws the power trace over the run with phase bands, or the
// reasons there is none.
func powerChart(r *Report, bands func(*chart)) string {
	end := r.WallS
	if len(r.Power.TraceW) == 0 {
		c := newChart("Power", "time into run (s)", "W", 1000, 200, 0, end, 0, 1)
		c.axes()
		bands(c)
		if r.Power.EnergyJ == nil {
			c.note("power: unavailable on this device (energy_j = null)", truncate(powerWhy(&r.Power.Report), 140))
		} else {
			c.note(fmt.Sprintf("average %s W over %.1f s (%s, %s); the source gave no per-sample trace",
				fmtPtr(r.Power.AvgW, 2), r.Power.MeasuredS, r.Power.Source, r.Power.Scope))
		}
		return c.String()
	}
	lo, hi := traceRange(r.Power.TraceW)
	title := fmt.Sprintf("Power: %s (%s)", r.Power.Source, r.Power.Scope)
	if r.Power.AvgW != nil {
		title += fmt.Sprintf(", average %.2f W", *r.Power.AvgW)
	}
	c := newChart(title, "time into run (s)", "power (W)", 1000, 220, 0, end, lo, hi)
	c.axes()
	bands(c)
	for _, seg := range segments(r.Power.TraceW) {
		c.polyline(seg, palette[5])
	}
	if r.Power.IdleWBefore != nil {
		c.hline(*r.Power.IdleWBefore, "#888", fmt.Sprintf("idle before %.2f W", *r.Power.IdleWBefore))
	}
	return c.String()
}

// tempChart draws the hottest zone's temperature over the run, or says
// there is no thermal zone.
func tempChart(r *Report, bands func(*chart)) string {
	end := r.WallS
	if len(r.Power.TempC) == 0 {
		c := newChart("Temperature", "time into run (s)", "°C", 1000, 160, 0, end, 0, 1)
		c.axes()
		bands(c)
		if len(r.Power.Thermal) == 0 {
			c.note("temperature: no thermal zone found")
		} else {
			c.note("temperature: thermal zones found but no reading during the run")
		}
		return c.String()
	}
	lo, hi := traceRange(r.Power.TempC)
	c := newChart("Temperature (hottest thermal zone)", "time into run (s)", "temperature (°C)", 1000, 200, 0, end, lo, hi)
	c.axes()
	bands(c)
	for _, seg := range segments(r.Power.TempC) {
		c.polyline(seg, palette[3])
	}
	return c.String()
}
