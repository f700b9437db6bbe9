package loadgen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

// Burst and recovery. The seeds' acceptance method runs a burst and then a
// recovery phase because what matters is not only that overload is
// refused but that the service comes back: a server that refuses fast
// under a burst and then goes on refusing while idle has failed its users
// twice. A run whose phases include a baseline, a burst and a recovery (by
// Kind, in that order) gets a RecoveryReport: each phase's admitted and
// refused requests, the TTFT of those admitted, how fast refusals came
// back, and how long after the burst the service behaved as before.

// RecoveryGoals are the goals a burst-and-recovery run is judged on; a
// zero field takes its default.
type RecoveryGoals struct {
	// MaxTTFTRatio bounds the recovery phase's TTFT p99 ÷ the baseline's
	// (admitted requests); default 1.1.
	MaxTTFTRatio float64 `json:"max_ttft_ratio,omitempty"`
	// MaxRefusalMs bounds the p99 of arrival → refusal during the burst;
	// default 50 ms.
	MaxRefusalMs float64 `json:"max_refusal_ms,omitempty"`
	// MaxFirstAdmittedS bounds the time from the burst's end to the first
	// fail-fast request admitted; default 1 s.
	MaxFirstAdmittedS float64 `json:"max_first_admitted_s,omitempty"`
}

func (g *RecoveryGoals) withDefaults() RecoveryGoals {
	var out RecoveryGoals
	if g != nil {
		out = *g
	}
	if out.MaxTTFTRatio == 0 {
		out.MaxTTFTRatio = 1.1
	}
	if out.MaxRefusalMs == 0 {
		out.MaxRefusalMs = 50
	}
	if out.MaxFirstAdmittedS == 0 {
		out.MaxFirstAdmittedS = 1
	}
	return out
}

// RecoveryReport is report.json's "recovery".
type RecoveryReport struct {
	Baseline PhaseFigures `json:"baseline"`
	Burst    PhaseFigures `json:"burst"`
	Recovery PhaseFigures `json:"recovery"`
	// TTFTP99Ratio is the recovery phase's TTFT p99 ÷ the baseline's, of
	// admitted requests; null when either has no sample.
	TTFTP99Ratio *float64 `json:"ttft_p99_ratio"`
	// BaselineHalvesRatio is the noise floor of TTFTP99Ratio: the larger
	// TTFT p99 of the baseline's two halves (by arrival) ÷ the smaller, a
	// ratio between two stretches of the same load. When it is over the
	// goal's bound, this run cannot tell a recovery within the bound from
	// one outside it (a p99 of a few hundred millisecond-scale first
	// tokens is a handful of outliers), and the ratio's verdict is a
	// retest; null when a half has no sample.
	BaselineHalvesRatio *float64 `json:"baseline_halves_ttft_p99_ratio"`
	// BetterHalfRatio is the recovery phase's TTFT p99 ÷ that of the
	// baseline's better half (the smaller p99), a stricter comparison than
	// TTFTP99Ratio: a noisy baseline inflates its p99 and so flatters the
	// recovery, but not its quieter half. A recovery within the bound of
	// it is within the bound however noisy the baseline; null when a half
	// has fewer than 100 samples.
	BetterHalfRatio *float64 `json:"ttft_p99_ratio_to_better_half"`
	// FirstAdmittedS is the time from the burst's end to the arrival of
	// the first fail-fast request admitted after it; null when none was.
	FirstAdmittedS *float64 `json:"first_fail_fast_admitted_s"`
	// RecoveredS is the time from the burst's end to the arrival of the
	// first request from which on every request was admitted and every
	// one admitted met its TTFT objective (0: the first request after the
	// burst already did); null when the recovery phase ended without it.
	RecoveredS *float64 `json:"recovered_s"`
	// Why explains a null above.
	Why   string        `json:"why,omitempty"`
	Goals RecoveryGoals `json:"goals"`
}

// PhaseFigures are one phase's requests split by what admission did.
type PhaseFigures struct {
	Phase    string `json:"phase"`
	Requests int    `json:"requests"`
	// FailFast counts the requests sent fail-fast; Admitted every request
	// not refused; Refused those refused at admission (HTTP 429/503).
	FailFast int `json:"fail_fast"`
	Admitted int `json:"admitted"`
	Refused  int `json:"refused"`
	// TTFTMs is the TTFT of admitted requests; FailFastTTFTMs that of the
	// admitted fail-fast ones, whose objective admission promised.
	TTFTMs         metrics.Quantiles `json:"ttft_ms"`
	FailFastTTFTMs metrics.Quantiles `json:"fail_fast_ttft_ms"`
	// MetTTFT is the share of admitted fail-fast requests whose TTFT met
	// their objective (over FailFastTTFTMs.Count requests); null without one.
	MetTTFT *float64 `json:"fail_fast_met_ttft"`
	// RefusalMs is arrival → refusal of the refused requests, all of them.
	// RefusedInQueue counts those refused after a wait in the queue (a
	// fail-fast request queued on a prediction that it would fit, refused
	// once it could not: about its objective late); ArrivalRefusalMs is
	// the latency of the others, the admission decision's.
	RefusalMs        metrics.Quantiles `json:"refusal_ms"`
	RefusedInQueue   int               `json:"refused_in_queue"`
	ArrivalRefusalMs metrics.Quantiles `json:"arrival_refusal_ms"`
}

type phaseAcc struct {
	fig                            PhaseFigures
	ttft, ffTTFT, refusal, arrival *metrics.Histogram
	met                            int
}

func newPhaseAcc(name string) *phaseAcc {
	h := func() *metrics.Histogram { return metrics.NewHistogram(0.01) }
	return &phaseAcc{fig: PhaseFigures{Phase: name}, ttft: h(), ffTTFT: h(), refusal: h(), arrival: h()}
}

func (a *phaseAcc) add(t *metrics.Timeline) {
	f := &a.fig
	f.Requests++
	if t.FailFast {
		f.FailFast++
	}
	if t.Outcome == metrics.Rejected {
		f.Refused++
		if t.RefusedInQueue {
			f.RefusedInQueue++
		}
		if !t.Finished.IsZero() {
			d := ms(t.Finished.Sub(t.Arrived))
			a.refusal.Record(d)
			if !t.RefusedInQueue {
				a.arrival.Record(d)
			}
		}
		return
	}
	f.Admitted++
	ttft, ok := t.TTFT()
	if !ok {
		return
	}
	a.ttft.Record(ms(ttft))
	if t.FailFast {
		a.ffTTFT.Record(ms(ttft))
		if t.SLO.TTFT <= 0 || ttft <= t.SLO.TTFT {
			a.met++
		}
	}
}

func (a *phaseAcc) figures() PhaseFigures {
	f := a.fig
	f.TTFTMs, f.FailFastTTFTMs = metrics.QuantilesOf(a.ttft), metrics.QuantilesOf(a.ffTTFT)
	f.RefusalMs, f.ArrivalRefusalMs = metrics.QuantilesOf(a.refusal), metrics.QuantilesOf(a.arrival)
	if n := a.ffTTFT.Count(); n > 0 {
		v := float64(a.met) / float64(n)
		f.MetTTFT = &v
	}
	return f
}

// recoveryPhases finds the baseline, burst and recovery phases (the first
// of each kind, in that order) in res, or reports ok=false.
func recoveryPhases(res *Result) (base, burst, rec int, ok bool) {
	base, burst, rec = -1, -1, -1
	for i, p := range res.Phases {
		switch {
		case p.Phase.Kind == "baseline" && base < 0:
			base = i
		case p.Phase.Kind == "burst" && base >= 0 && burst < 0:
			burst = i
		case p.Phase.Kind == "recovery" && burst >= 0 && rec < 0:
			rec = i
		}
	}
	return base, burst, rec, rec >= 0
}

// recoveryReport reads the run's timeline file (twice, holding nothing per
// request) into a RecoveryReport; nil when the run has no baseline, burst
// and recovery phases.
func recoveryReport(res *Result) (*RecoveryReport, error) {
	base, burst, rec, ok := recoveryPhases(res)
	if !ok || res.TimelineFile == "" {
		return nil, nil
	}
	accs := map[int]*phaseAcc{base: newPhaseAcc(res.Phases[base].Phase.Name),
		burst: newPhaseAcc(res.Phases[burst].Phase.Name), rec: newPhaseAcc(res.Phases[rec].Phase.Name)}
	burstEnd := res.Phases[burst].End
	// The baseline's halves, for the noise floor of the p99 ratio.
	bStart, bEnd := res.Phases[base].Start, res.Phases[base].End
	bMid := bStart.Add(bEnd.Sub(bStart) / 2)
	halves := [2]*metrics.Histogram{metrics.NewHistogram(0.01), metrics.NewHistogram(0.01)}
	// Pass 1: the figures, the first fail-fast admission after the burst,
	// and the last arrival after it that was refused or missed its TTFT.
	var firstAdmitted, lastBad time.Time
	bad := func(t *metrics.Timeline) bool {
		if t.Outcome == metrics.Rejected {
			return true
		}
		ttft, ok := t.TTFT()
		return ok && t.SLO.TTFT > 0 && ttft > t.SLO.TTFT
	}
	err := eachTimeline(res.TimelineFile, func(phase int, t *metrics.Timeline) {
		if a := accs[phase]; a != nil {
			a.add(t)
		}
		if phase == base && t.Outcome != metrics.Rejected {
			if ttft, ok := t.TTFT(); ok {
				h := halves[0]
				if !t.Arrived.Before(bMid) {
					h = halves[1]
				}
				h.Record(ms(ttft))
			}
		}
		if phase != rec {
			return
		}
		if t.FailFast && t.Outcome != metrics.Rejected && (firstAdmitted.IsZero() || t.Arrived.Before(firstAdmitted)) {
			firstAdmitted = t.Arrived
		}
		if bad(t) && t.Arrived.After(lastBad) {
			lastBad = t.Arrived
		}
	})
	if err != nil {
		return nil, err
	}
	r := &RecoveryReport{Baseline: accs[base].figures(), Burst: accs[burst].figures(), Recovery: accs[rec].figures(),
		Goals: res.Spec.Recovery.withDefaults()}
	if b, v := r.Baseline.TTFTMs.P99, r.Recovery.TTFTMs.P99; b != nil && v != nil && *b > 0 {
		x := *v / *b
		r.TTFTP99Ratio = &x
	}
	if a, b := metrics.QuantilesOf(halves[0]).P99, metrics.QuantilesOf(halves[1]).P99; a != nil && b != nil && min(*a, *b) > 0 {
		x := max(*a, *b) / min(*a, *b)
		r.BaselineHalvesRatio = &x
		if v := r.Recovery.TTFTMs.P99; v != nil && min(halves[0].Count(), halves[1].Count()) >= 100 {
			y := *v / min(*a, *b)
			r.BetterHalfRatio = &y
		}
	}
	since := func(t time.Time) *float64 { v := max(t.Sub(burstEnd).Seconds(), 0); return &v }
	switch {
	case !firstAdmitted.IsZero():
		r.FirstAdmittedS = since(firstAdmitted)
	case r.Recovery.FailFast > 0:
		r.Why = "no fail-fast request was admitted after the burst"
	}
	if lastBad.IsZero() {
		v := 0.0
		r.RecoveredS = &v
		return r, nil
	}
	// Pass 2: the first request after the last bad one.
	var firstGood time.Time
	err = eachTimeline(res.TimelineFile, func(phase int, t *metrics.Timeline) {
		if phase == rec && t.Arrived.After(lastBad) && (firstGood.IsZero() || t.Arrived.Before(firstGood)) {
			firstGood = t.Arrived
		}
	})
	if err != nil {
		return nil, err
	}
	if firstGood.IsZero() {
		r.Why = join(r.Why, fmt.Sprintf("the recovery phase's last request (%.2f s after the burst) was still refused or over its TTFT objective", lastBad.Sub(burstEnd).Seconds()))
	} else {
		r.RecoveredS = since(firstGood)
	}
	return r, nil
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// eachTimeline calls fn for every line of a timeline file.
func eachTimeline(path string, fn func(phase int, t *metrics.Timeline)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("loadgen: timeline file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for i := 1; sc.Scan(); i++ {
		var l timelineLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("loadgen: timeline file line %d: %w", i, err)
		}
		fn(l.Phase, l.Timeline)
	}
	return sc.Err()
}

// verdicts judges the report against its goals.
func (r *RecoveryReport) verdicts() []Verdict {
	g := r.Goals
	v := func(name, metric, phase string, limit float64, value *float64, samples, need int, reason string) Verdict {
		out := Verdict{Threshold: name, Metric: metric, Phase: phase, Max: &limit, Value: value, Samples: samples, MinSamples: need}
		switch {
		case value == nil:
			out.Status, out.Reason = Retest, reason
		case samples < need:
			out.Status, out.Reason = Retest, fmt.Sprintf("%d samples; this figure needs %d", samples, need)
		case *value <= limit:
			out.Status, out.Reason = Pass, "within the goal"
		default:
			out.Status, out.Reason = Block, "over the goal"
		}
		return out
	}
	var out []Verdict
	// A p99 stands on at least 100 samples (in both phases, for a ratio),
	// and a ratio is judged only when the baseline's own halves agree
	// within the bound: otherwise the bound is inside the noise. Then a
	// recovery within the bound even of the baseline's better half passes
	// (the noise can only have flattered the whole baseline's p99, not
	// that half's); anything else is a retest.
	ratio := v(fmt.Sprintf("recovery TTFT p99 ÷ baseline TTFT p99 ≤ %g", g.MaxTTFTRatio), "ttft_p99_ratio", r.Recovery.Phase,
		g.MaxTTFTRatio, r.TTFTP99Ratio, int(min(r.Recovery.TTFTMs.Count, r.Baseline.TTFTMs.Count)), 100,
		"no admitted request with a first token in the baseline or the recovery phase")
	if n := r.BaselineHalvesRatio; n != nil && *n > g.MaxTTFTRatio && ratio.Status != Retest {
		if h := r.BetterHalfRatio; h != nil && *h <= g.MaxTTFTRatio {
			ratio.Status, ratio.Reason = Pass, fmt.Sprintf("within the goal against the baseline's better half too (%s; the halves differ by %s×)",
				fmtPtr(h, 3), fmtPtr(n, 3))
		} else {
			ratio.Status, ratio.Reason = Retest, fmt.Sprintf("%s (%s; %s against the baseline's better half), but the baseline's two halves differ by %s×: the noise is over the bound; run longer phases",
				ratio.Reason, fmtPtr(r.TTFTP99Ratio, 3), fmtPtr(h, 3), fmtPtr(n, 3))
		}
	}
	out = append(out, ratio)
	out = append(out, v(fmt.Sprintf("refusal p99 ≤ %g ms", g.MaxRefusalMs), "refusal_ms.p99", r.Burst.Phase,
		g.MaxRefusalMs, r.Burst.RefusalMs.P99, int(r.Burst.RefusalMs.Count), 100, "no request was refused during the burst"))
	out = append(out, v(fmt.Sprintf("first fail-fast request admitted ≤ %g s after the burst", g.MaxFirstAdmittedS), "first_fail_fast_admitted_s", r.Recovery.Phase,
		g.MaxFirstAdmittedS, r.FirstAdmittedS, r.Recovery.FailFast, 1, r.Why))
	// Admitted fail-fast requests kept their TTFT promise during the
	// burst: at most 1 % of them over their objective (a p99), judged on
	// at least 100 of them.
	if r.Burst.MetTTFT != nil {
		miss := 1 - *r.Burst.MetTTFT
		out = append(out, v("admitted fail-fast requests over their TTFT objective during the burst ≤ 1 % (p99 within it)", "fail_fast_ttft_miss_rate", r.Burst.Phase,
			0.01, &miss, int(r.Burst.FailFastTTFTMs.Count), 100, ""))
	}
	return out
}

// firstAdmitted is the first-admission figure, or why there is none.
func firstAdmitted(r *RecoveryReport) string {
	switch {
	case r.FirstAdmittedS != nil:
		return fmtPtr(r.FirstAdmittedS, 2) + " s"
	case r.Recovery.FailFast == 0:
		return "n/a: no fail-fast request in the recovery phase"
	}
	return "never"
}

// recoveryRows is report.md's "Burst and recovery" table.
func recoveryRows(r *RecoveryReport) [][]string {
	secs := func(v *float64) string {
		if v == nil {
			return "never"
		}
		return fmtPtr(v, 2) + " s"
	}
	rows := [][]string{{"phase", "requests (fail-fast)", "admitted", "refused (in queue)", "TTFT p50 / p99 ms (n)", "fail-fast TTFT p99 ms, within objective", "refusal p50 / p99 ms (n)", "at arrival p99 ms"}}
	for _, f := range []PhaseFigures{r.Baseline, r.Burst, r.Recovery} {
		rows = append(rows, []string{f.Phase, fmt.Sprintf("%d (%d)", f.Requests, f.FailFast), fmt.Sprint(f.Admitted), fmt.Sprintf("%d (%d)", f.Refused, f.RefusedInQueue),
			fmt.Sprintf("%s / %s (%d)", fmtPtr(f.TTFTMs.P50, 1), fmtPtr(f.TTFTMs.P99, 1), f.TTFTMs.Count),
			fmt.Sprintf("%s, %s of %d", fmtPtr(f.FailFastTTFTMs.P99, 1), fmtPtr(f.MetTTFT, 3), f.FailFastTTFTMs.Count),
			fmt.Sprintf("%s / %s (%d)", fmtPtr(f.RefusalMs.P50, 1), fmtPtr(f.RefusalMs.P99, 1), f.RefusalMs.Count), fmtPtr(f.ArrivalRefusalMs.P99, 1)})
	}
	rows = append(rows,
		[]string{"recovery TTFT p99 ÷ baseline", fmtPtr(r.TTFTP99Ratio, 3)},
		[]string{"noise floor: the baseline's halves, larger TTFT p99 ÷ smaller", fmtPtr(r.BaselineHalvesRatio, 3)},
		[]string{"recovery TTFT p99 ÷ the baseline's better half", fmtPtr(r.BetterHalfRatio, 3)},
		[]string{"first fail-fast request admitted after the burst", firstAdmitted(r)},
		[]string{"recovered (every request admitted and within its TTFT from then on)", secs(r.RecoveredS)})
	if r.Why != "" {
		rows = append(rows, []string{"why", r.Why})
	}
	return rows
}
