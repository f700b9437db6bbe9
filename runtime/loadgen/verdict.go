package loadgen

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/pkg/power"
)

// Verdict statuses, from the seeds' three-state acceptance: pass (the
// evidence is complete and the threshold holds), retest (evidence
// incomplete: too few samples, a window shorter than the sensor's
// resolution, no sensor) and block (the threshold fails, or no load can
// meet it).
const (
	Pass   = "pass"
	Retest = "retest"
	Block  = "block"
)

// Verdict is the judgement of one threshold.
type Verdict struct {
	Threshold  string   `json:"threshold"`
	Metric     string   `json:"metric"`
	Phase      string   `json:"phase,omitempty"`
	Max        *float64 `json:"max,omitempty"`
	Min        *float64 `json:"min,omitempty"`
	Value      *float64 `json:"value"`
	Samples    int      `json:"samples"`
	MinSamples int      `json:"min_samples"`
	Status     string   `json:"status"`
	Reason     string   `json:"reason"`
}

// String renders the threshold as "ttft_ms.p99 ≤ 300 (phase burst)".
func (t Threshold) String() string {
	var parts []string
	if t.Min != nil {
		parts = append(parts, t.Metric+" ≥ "+fmtFloat(*t.Min))
	}
	if t.Max != nil {
		parts = append(parts, t.Metric+" ≤ "+fmtFloat(*t.Max))
	}
	s := strings.Join(parts, ", ")
	if t.Phase != "" {
		s += " (phase " + t.Phase + ")"
	}
	return s
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

func fmtPtr(v *float64, prec int) string {
	if v == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}

// minSamples is the evidence a threshold needs: a quantile q needs at
// least 1/(1−q) samples to be more than the maximum; an attainment or
// failure-rate limit L needs enough requests for one miss to matter.
func (t Threshold) minSamples() int {
	if t.MinSamples > 0 {
		return t.MinSamples
	}
	if _, q, ok := splitQuantile(t.Metric); ok {
		return int(math.Ceil(1/(1-q) - 1e-9))
	}
	switch t.Metric {
	case "slo_attainment":
		if t.Min != nil && *t.Min < 1 {
			return min(int(math.Ceil(1/(1-*t.Min)-1e-9)), 10000)
		}
	case "failure_rate":
		if t.Max != nil && *t.Max > 0 {
			return min(int(math.Ceil(1 / *t.Max)), 10000)
		}
	}
	return 1
}

func splitQuantile(metric string) (dist string, q float64, ok bool) {
	d, qs, found := strings.Cut(metric, ".")
	if !found {
		return "", 0, false
	}
	q, ok = quantiles[qs]
	return d, q, ok
}

// latencyOf returns a summary's distribution by its JSON name.
func latencyOf(l *metrics.Latency, dist string) *metrics.Quantiles {
	switch dist {
	case "ttft_ms":
		return &l.TTFTMs
	case "tpot_ms":
		return &l.TPOTMs
	case "itl_ms":
		return &l.ITLMs
	case "e2e_ms":
		return &l.E2EMs
	case "queue_ms":
		return &l.QueueMs
	}
	return nil
}

// metricValue reads a metric from a summary (and the power report for
// energy); it returns the value (nil when not measured), the number of
// samples behind it, and why it is missing or incomplete (a value with a
// reason is shown but cannot pass).
func metricValue(s *metrics.Summary, metric string, pw *power.Report) (*float64, int, string) {
	if dist, q, ok := splitQuantile(metric); ok {
		d := latencyOf(&s.Latency, dist)
		var v *float64
		switch q {
		case 0.5:
			v = d.P50
		case 0.9:
			v = d.P90
		case 0.95:
			v = d.P95
		case 0.99:
			v = d.P99
		case 0.999:
			v = d.P999
		}
		if v == nil {
			return nil, int(d.Count), "no samples"
		}
		return v, int(d.Count), ""
	}
	switch metric {
	case "slo_attainment":
		return orWhy(s.SLOAttainment, s.Requests, "no requests")
	case "goodput_tok_s":
		return orWhy(s.GoodputTokS, s.Requests, "no wall time")
	case "throughput_tok_s":
		return orWhy(s.ThroughputTokS, s.Requests, "no wall time")
	case "failure_rate":
		if s.Requests == 0 {
			return nil, 0, "no requests"
		}
		v := float64(s.Requests-s.Outcomes[metrics.Completed]) / float64(s.Requests)
		return &v, s.Requests, ""
	case "energy_j_per_token":
		if pw == nil || pw.EnergyJ == nil {
			return nil, 0, "no energy measured: " + powerWhy(pw)
		}
		if pw.MeasuredS*1000 < pw.ResolutionMs {
			return nil, pw.Samples, fmt.Sprintf("window %.3f s shorter than the sensor's resolution %.0f ms", pw.MeasuredS, pw.ResolutionMs)
		}
		if s.OutputTokens == 0 {
			return nil, 0, "no output tokens"
		}
		v := *pw.EnergyJ / float64(s.OutputTokens)
		if gaps := primaryGaps(pw); gaps > 0 {
			// The energy covers only the stretches between the gaps while
			// the tokens cover the whole run: the ratio understates the
			// cost, so it cannot pass a limit. It is still reported.
			return &v, pw.Samples, fmt.Sprintf("energy has %d gap(s) in the %s readings (a vanished file or a counter reset): joules over part of the run, tokens over all of it", gaps, pw.Source)
		}
		return &v, pw.Samples, ""
	}
	return nil, 0, "unknown metric"
}

// orWhy returns why only when v is missing.
func orWhy(v *float64, n int, why string) (*float64, int, string) {
	if v != nil {
		why = ""
	}
	return v, n, why
}

// primaryGaps is the number of gaps in the primary source's samples.
func primaryGaps(pw *power.Report) int {
	for _, sr := range pw.Sources {
		if sr.Name == pw.Source {
			return sr.Gaps
		}
	}
	return 0
}

// powerWhy summarises why a power report has no energy.
func powerWhy(pw *power.Report) string {
	if pw == nil {
		return "no power report"
	}
	var why []string
	for _, u := range pw.UnavailableReasons {
		why = append(why, u.Source+": "+u.Reason)
	}
	why = append(why, pw.Notes...)
	if len(why) == 0 {
		return "no sensor"
	}
	if len(why) > 3 {
		why = append(why[:3], fmt.Sprintf("and %d more", len(why)-3))
	}
	return strings.Join(why, "; ")
}

// violates says how v breaks t, or "" when it holds.
func violates(t Threshold, v float64) string {
	if t.Max != nil && v > *t.Max {
		return fmt.Sprintf("%s = %s > %s", t.Metric, fmtFloat(round3(v)), fmtFloat(*t.Max))
	}
	if t.Min != nil && v < *t.Min {
		return fmt.Sprintf("%s = %s < %s", t.Metric, fmtFloat(round3(v)), fmtFloat(*t.Min))
	}
	return ""
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// judge decides one threshold. warm is the unloaded (warm-up) summary,
// nil without warm-up; sweep is the sweep's result, nil without one.
func judge(t Threshold, s *metrics.Summary, warm *metrics.Summary, sweep *SweepResult, pw *power.Report) Verdict {
	v := Verdict{Threshold: t.String(), Metric: t.Metric, Phase: t.Phase, Max: t.Max, Min: t.Min, MinSamples: t.minSamples()}
	if why := unreachable(t, warm); why != "" {
		v.Value, v.Samples, _ = metricValue(s, t.Metric, pw)
		v.Status, v.Reason = Block, why
		return v
	}
	val, n, why := metricValue(s, t.Metric, pw)
	v.Value, v.Samples = val, n
	switch {
	case val == nil || why != "":
		// No value, or a value whose evidence has holes: retest.
		v.Status, v.Reason = Retest, "evidence incomplete: "+why
		if val != nil {
			if bad := violates(t, *val); bad != "" {
				v.Reason += " (measured " + bad + ")"
			}
		}
	case n < v.MinSamples:
		v.Status, v.Reason = Retest, fmt.Sprintf("too few samples: %d < %d", n, v.MinSamples)
		if bad := violates(t, *val); bad != "" {
			v.Reason += " (measured " + bad + ")"
		}
	default:
		if bad := violates(t, *val); bad != "" {
			v.Status, v.Reason = Block, "measured "+bad
			if also := sweepFailedLowest(t, sweep); also != "" {
				v.Reason += "; " + also
			}
		} else {
			v.Status, v.Reason = Pass, fmt.Sprintf("holds: %s = %s over %d samples", t.Metric, fmtFloat(round3(*val)), n)
		}
	}
	return v
}

// unreachable says why no load can meet a latency limit: a limit ≤ 0, or
// one below the fastest value seen unloaded (one request at a time).
func unreachable(t Threshold, warm *metrics.Summary) string {
	dist, _, ok := splitQuantile(t.Metric)
	if !ok || t.Max == nil {
		return ""
	}
	if *t.Max <= 0 {
		return fmt.Sprintf("no load can meet %s: a latency limit must be > 0", t.String())
	}
	if warm != nil {
		if d := latencyOf(&warm.Latency, dist); d.Min != nil && *d.Min > *t.Max {
			return fmt.Sprintf("no load can meet %s: unloaded (warm-up, one request at a time) the fastest %s was %.3f ms over %d samples",
				t.String(), dist, *d.Min, d.Count)
		}
	}
	return ""
}

// sweepFailedLowest adds to a measured miss that the sweep's lowest load
// failed the same limit and no load was stable. It is not a verdict of its
// own: one short trial on a busy machine is weaker evidence than the run.
func sweepFailedLowest(t Threshold, sweep *SweepResult) string {
	if t.Phase != "" || sweep == nil || sweep.MaxStable != nil || len(sweep.Points) == 0 || !strings.HasPrefix(sweep.Points[0].Why, t.Metric+" ") {
		return ""
	}
	p := sweep.Points[0]
	return fmt.Sprintf("the sweep's lowest load (%s %g) failed it too (%s): no load tried was stable", sweep.Mode, p.Load, p.Why)
}
