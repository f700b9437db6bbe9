package loadgen

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

// TestRecoveryReport checks the burst-and-recovery figures on a timeline
// file written by hand: who was admitted and refused in each phase, the
// first fail-fast request admitted after the burst, and the point from
// which every request was admitted within its objective.
func TestRecoveryReport(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	reqs := []timedReq{
		{0, 0.1, true, 10 * ms, false}, {0, 0.5, false, 20 * ms, false},
		{1, 1.1, true, 0, false}, {1, 1.2, true, 0, true}, {1, 1.3, true, 90 * ms, false}, {1, 1.4, false, 900 * ms, false},
		// The burst ends at 2 s. A refusal at 2.1 s and a late first
		// token at 2.5 s; from 2.7 s on every request is on time.
		{2, 2.1, true, 0, false}, {2, 2.3, true, 30 * ms, false}, {2, 2.5, false, 150 * ms, false},
		{2, 2.7, true, 12 * ms, false}, {2, 2.9, false, 11 * ms, false},
	}
	r := reportOf(t, t0, reqs, 1, 2, 3)
	b := r.Burst
	if b.Requests != 4 || b.Admitted != 2 || b.Refused != 2 || b.RefusedInQueue != 1 || b.FailFast != 3 {
		t.Errorf("burst figures %+v", b)
	}
	if b.MetTTFT == nil || *b.MetTTFT != 1 || b.ArrivalRefusalMs.Count != 1 || b.RefusalMs.Count != 2 {
		t.Errorf("burst: met %v, refusals %d (%d at arrival)", b.MetTTFT, b.RefusalMs.Count, b.ArrivalRefusalMs.Count)
	}
	if !near(r.FirstAdmittedS, 0.3) {
		t.Errorf("first fail-fast admitted after the burst: %v s, want 0.3", ptrVal(r.FirstAdmittedS))
	}
	if !near(r.RecoveredS, 0.7) {
		t.Errorf("recovered after %v s, want 0.7 (the request after the late one at 2.5 s)", ptrVal(r.RecoveredS))
	}
	if r.TTFTP99Ratio == nil || *r.TTFTP99Ratio < 5 {
		t.Errorf("recovery TTFT p99 ÷ baseline: %v, want ~7.5 (150 ms ÷ 20 ms)", ptrVal(r.TTFTP99Ratio))
	}
	// Too few samples for any p99: the verdicts say retest, never pass.
	for _, v := range r.verdicts() {
		if v.Metric != "first_fail_fast_admitted_s" && v.Status == Pass {
			t.Errorf("verdict %q passed on %d samples", v.Threshold, v.Samples)
		}
	}
}

// timedReq is one request of a hand-written timeline file: its phase, its
// arrival in seconds, whether it was sent fail-fast, its TTFT (0: refused)
// and, if refused, whether after a wait in the queue.
type timedReq struct {
	phase   int
	arrived float64
	ff      bool
	ttft    time.Duration
	inQueue bool
}

// writeTimelines writes reqs as a run's timeline file, under a 100 ms TTFT
// objective, and returns its path.
func writeTimelines(t *testing.T, t0 time.Time, reqs []timedReq) string {
	t.Helper()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ms := time.Millisecond
	path := filepath.Join(t.TempDir(), "timelines.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for i, r := range reqs {
		tl := metrics.NewTimeline(uint64(i), "interactive", at(r.arrived), 1)
		tl.SLO, tl.FailFast = metrics.SLO{TTFT: 100 * ms}, r.ff
		if r.ttft == 0 {
			d := 2 * ms
			if r.inQueue {
				d = 100 * ms
			}
			tl.RefusedInQueue = r.inQueue
			tl.Finish(at(r.arrived).Add(d), metrics.Rejected)
		} else {
			tl.Token(at(r.arrived).Add(r.ttft))
			tl.Finish(at(r.arrived).Add(r.ttft+ms), metrics.Completed)
		}
		if err := enc.Encode(timelineLine{Phase: r.phase, Timeline: tl}); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// reportOf is the recovery report of reqs in a baseline from t0 to burst
// seconds, a burst to rec and a recovery to end.
func reportOf(t *testing.T, t0 time.Time, reqs []timedReq, burst, rec, end float64) *RecoveryReport {
	t.Helper()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	res := &Result{TimelineFile: writeTimelines(t, t0, reqs), Phases: []PhaseRun{
		{Phase: Phase{Name: "baseline", Kind: "baseline"}, Start: t0, End: at(burst)},
		{Phase: Phase{Name: "burst", Kind: "burst"}, Start: at(burst), End: at(rec)},
		{Phase: Phase{Name: "recovery", Kind: "recovery"}, Start: at(rec), End: at(end)},
	}}
	r, err := recoveryReport(res)
	if err != nil || r == nil {
		t.Fatalf("report %v, err %v", r, err)
	}
	return r
}

// TestRecoveryNoiseFloor: the p99 ratio is judged only when the baseline's
// own halves agree within its bound. Each phase here has 300 requests at
// 10 ms; four at 40 ms set a phase's p99 (the 3rd largest) and a half's.
func TestRecoveryNoiseFloor(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	run := func(baseSlowFrom, recSlow int) *RecoveryReport {
		var reqs []timedReq
		for i := range 300 {
			base, rec := 10*ms, 10*ms
			if i >= baseSlowFrom && i < baseSlowFrom+4 {
				base = 40 * ms
			}
			if i < recSlow {
				rec = 40 * ms
			}
			reqs = append(reqs, timedReq{0, float64(i) / 30, i%2 == 0, base, false},
				timedReq{1, 10 + float64(i)/300, true, 0, false},
				timedReq{2, 11 + float64(i)/30, i%2 == 0, rec, false})
		}
		slices.SortFunc(reqs, func(a, b timedReq) int { return cmp.Compare(a.arrived, b.arrived) })
		return reportOf(t, t0, reqs, 10, 11, 21)
	}
	ratioVerdict := func(r *RecoveryReport) Verdict {
		for _, v := range r.verdicts() {
			if v.Metric == "ttft_p99_ratio" {
				return v
			}
		}
		t.Fatal("no verdict on the p99 ratio")
		return Verdict{}
	}
	// A quiet baseline (no slow request) and a slow recovery: the ratio
	// is over the bound and the run can tell.
	quiet := run(-10, 4)
	if v := ratioVerdict(quiet); v.Status != Block || !near(quiet.BaselineHalvesRatio, 1) {
		t.Errorf("quiet baseline: verdict %s (%s), halves %v", v.Status, v.Reason, ptrVal(quiet.BaselineHalvesRatio))
	}
	// The slow requests all in the baseline's second half: its halves
	// differ by 4×. A slow recovery is then neither passed nor blocked;
	// a quiet one is within the bound of the baseline's quiet half too,
	// which the noise cannot have flattered: a pass.
	noisy := run(200, 4)
	if v := ratioVerdict(noisy); v.Status != Retest || !strings.Contains(v.Reason, "halves differ by 4.000×") || !near(noisy.BaselineHalvesRatio, 4) || !near(noisy.BetterHalfRatio, 4) {
		t.Errorf("noisy baseline, slow recovery: verdict %s (%s), halves %v, against the better half %v", v.Status, v.Reason, ptrVal(noisy.BaselineHalvesRatio), ptrVal(noisy.BetterHalfRatio))
	}
	clean := run(200, 0)
	if v := ratioVerdict(clean); v.Status != Pass || !strings.Contains(v.Reason, "better half too (1.000") || !near(clean.BetterHalfRatio, 1) {
		t.Errorf("noisy baseline, quiet recovery: verdict %s (%s), against the better half %v", v.Status, v.Reason, ptrVal(clean.BetterHalfRatio))
	}
}

func near(v *float64, want float64) bool { return v != nil && *v > want-1e-6 && *v < want+1e-6 }

func ptrVal(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}

// TestRSSTrendWithheld: an hourly RSS trend is given only over a span that
// can support it, and says what it stands on.
func TestRSSTrendWithheld(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	series := func(span time.Duration, mibPerHour float64) *Result {
		res := &Result{Start: start}
		for i := 0; i <= 100; i++ {
			at := time.Duration(i) * span / 100
			rss := int64((200 + mibPerHour*at.Hours()) * (1 << 20))
			res.Series = append(res.Series, SeriesPoint{At: start.Add(at), Resources: Resources{Known: true, RSSBytes: rss}})
		}
		return res
	}
	short := resourceReport(series(80*time.Second, 30), 5, false)
	if short.RSSGrowthMiBPerHour != nil || short.TrendWithheld == "" || !strings.HasPrefix(short.TrendText(), "withheld: ") {
		t.Errorf("80 s of samples: trend %v, withheld %q", ptrVal(short.RSSGrowthMiBPerHour), short.TrendWithheld)
	}
	long := resourceReport(series(20*time.Minute, 30), 60, false)
	if v := long.RSSGrowthMiBPerHour; v == nil || *v < 29 || *v > 31 || long.TrendSamples != 51 {
		t.Errorf("20 min at 30 MiB/h: trend %v over %d samples (%s)", ptrVal(v), long.TrendSamples, long.TrendText())
	}
}
