package loadgen

import (
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/pkg/power"
)

// TestEnergyPerTokenVerdict: energy per token passes only on complete
// evidence; gaps in the primary source's readings (a vanished file, a
// counter reset) make it retest with the reason, whatever the value.
func TestEnergyPerTokenVerdict(t *testing.T) {
	energy := func(j float64, gaps int) *power.Report {
		return &power.Report{EnergyJ: &j, Source: "ina3221 VDD_IN", MeasuredS: 10, ResolutionMs: 50, Samples: 200,
			Sources: []power.SourceReport{
				{Info: power.Info{Name: "rapl package-0"}, Gaps: 3}, // not the primary: ignored
				{Info: power.Info{Name: "ina3221 VDD_IN"}, Gaps: gaps},
			}}
	}
	sum := &metrics.Summary{OutputTokens: 1000, Requests: 50}
	for _, c := range []struct {
		name   string
		pw     *power.Report
		max    float64
		status string
		reason []string
	}{
		{"complete and under", energy(50, 0), 0.1, Pass, []string{"holds: energy_j_per_token = 0.05 over 200 samples"}},
		{"complete and over", energy(500, 0), 0.1, Block, []string{"measured energy_j_per_token = 0.5 > 0.1"}},
		{"gaps and under", energy(50, 2), 0.1, Retest, []string{"evidence incomplete", "2 gap(s)", "ina3221 VDD_IN"}},
		{"gaps and over", energy(500, 1), 0.1, Retest, []string{"evidence incomplete", "1 gap(s)", "(measured energy_j_per_token = 0.5 > 0.1)"}},
		{"no sensor", &power.Report{UnavailableReasons: []power.Unavailable{{Source: "rapl", Reason: "no powercap"}}}, 0.1, Retest,
			[]string{"evidence incomplete: no energy measured: rapl: no powercap"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := judge(Threshold{Metric: "energy_j_per_token", Max: limit(c.max)}, sum, nil, nil, c.pw)
			if v.Status != c.status {
				t.Fatalf("status %s, want %s (%s)", v.Status, c.status, v.Reason)
			}
			for _, r := range c.reason {
				if !strings.Contains(v.Reason, r) {
					t.Errorf("reason %q lacks %q", v.Reason, r)
				}
			}
			if c.pw.EnergyJ != nil && v.Value == nil {
				t.Error("the measured value is not reported")
			}
		})
	}
}

// TestBatchPresetVerdicts: the batch preset judges only the failure rate
// (TTFT unbounded), and other scalar metrics pass with values present.
func TestBatchPresetVerdicts(t *testing.T) {
	p := Presets["batch"]
	if p.SLO.TTFT != 0 {
		t.Fatalf("batch preset bounds TTFT: %v", p.SLO.TTFT)
	}
	att, good := 0.5, 12.0
	sum := &metrics.Summary{Requests: 200, OutputTokens: 4000, SLOAttainment: &att, GoodputTokS: &good,
		Outcomes: map[metrics.Outcome]int{metrics.Completed: 199, metrics.Failed: 1}}
	for _, th := range p.Thresholds {
		if v := judge(th, sum, nil, nil, nil); v.Status != Pass {
			t.Errorf("%s: %s (%s)", v.Threshold, v.Status, v.Reason)
		}
	}
	for _, th := range []Threshold{{Metric: "slo_attainment", Min: limit(0.4)}, {Metric: "goodput_tok_s", Min: limit(10)}} {
		if v := judge(th, sum, nil, nil, nil); v.Status != Pass {
			t.Errorf("%s: %s (%s)", v.Threshold, v.Status, v.Reason)
		}
	}
}

// TestSweepLowestFailureIsNotAVerdict: a sweep whose lowest 2 s trial
// failed a limit does not by itself make the limit unreachable: the run's
// own measurement decides, and a measured miss mentions the sweep.
func TestSweepLowestFailureIsNotAVerdict(t *testing.T) {
	sweep := &SweepResult{Mode: "concurrency", Points: []SweepPoint{{Load: 1, Why: "itl_ms.p99 = 89.57 > 50"}}}
	th := Threshold{Metric: "itl_ms.p99", Max: limit(50)}
	for _, c := range []struct {
		name   string
		p99    float64
		status string
		reason []string
	}{
		{"run holds", 40, Pass, []string{"holds: itl_ms.p99 = 40 over 500 samples"}},
		{"run misses", 60, Block, []string{"measured itl_ms.p99 = 60 > 50", "the sweep's lowest load (concurrency 1) failed it too"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p99 := c.p99
			sum := &metrics.Summary{Requests: 50, Latency: metrics.Latency{ITLMs: metrics.Quantiles{Count: 500, P99: &p99}}}
			v := judge(th, sum, nil, sweep, nil)
			if v.Status != c.status {
				t.Fatalf("status %s, want %s (%s)", v.Status, c.status, v.Reason)
			}
			for _, r := range c.reason {
				if !strings.Contains(v.Reason, r) {
					t.Errorf("reason %q lacks %q", v.Reason, r)
				}
			}
			if strings.Contains(v.Reason, "no load can meet") {
				t.Errorf("one short trial claimed the limit unreachable: %q", v.Reason)
			}
		})
	}
}
