package loadgen

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Preset is a named set of objectives from the seeds' scenarios.
type Preset struct {
	Class      string
	SLO        SLOSpec
	Thresholds []Threshold
	Note       string
}

func limit(v float64) *float64 { return &v }

// Presets are the SLO presets: interactive chat (TTFT p99 ≤ 300 ms, ITL
// p99 ≤ 50 ms), voice agent (TTFT p99 ≤ 150 ms) and batch (throughput only,
// TTFT unbounded; judged on the share of failed requests). Users override
// any field or threshold in their spec.
var Presets = map[string]Preset{
	"interactive-chat": {
		Class: "interactive",
		SLO:   SLOSpec{TTFT: Duration(300 * time.Millisecond), TPOT: Duration(50 * time.Millisecond)},
		Thresholds: []Threshold{
			{Metric: "ttft_ms.p99", Max: limit(300)},
			{Metric: "itl_ms.p99", Max: limit(50)},
		},
		Note: "interactive chat: TTFT p99 ≤ 300 ms, ITL p99 ≤ 50 ms",
	},
	"voice-agent": {
		Class: "realtime",
		SLO:   SLOSpec{TTFT: Duration(150 * time.Millisecond)},
		Thresholds: []Threshold{
			{Metric: "ttft_ms.p99", Max: limit(150)},
		},
		Note: "voice agent: TTFT p99 ≤ 150 ms",
	},
	"batch": {
		Class: "batch",
		Thresholds: []Threshold{
			{Metric: "failure_rate", Max: limit(0.01)},
		},
		Note: "batch: throughput only, TTFT unbounded; ≤ 1 % of requests may fail",
	},
}

// PresetNames lists the presets in order.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// distributions are the latency distributions a threshold can name, as
// "<distribution>.<quantile>".
var distributions = []string{"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"}

// quantiles maps a quantile name to its q.
var quantiles = map[string]float64{"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}

// scalarMetrics are the non-distribution metrics a threshold can name.
var scalarMetrics = []string{"slo_attainment", "goodput_tok_s", "throughput_tok_s", "failure_rate", "energy_j_per_token"}

// Metrics lists every metric a threshold can name.
func Metrics() []string {
	var m []string
	for _, d := range distributions {
		for _, q := range []string{"p50", "p90", "p95", "p99", "p999"} {
			m = append(m, d+"."+q)
		}
	}
	return append(m, scalarMetrics...)
}

func checkMetric(m string) error {
	if slices.Contains(Metrics(), m) {
		return nil
	}
	return fmt.Errorf("unknown metric %q (want <%s>.<p50|p90|p95|p99|p999> or one of %s)",
		m, strings.Join(distributions, "|"), strings.Join(scalarMetrics, ", "))
}
