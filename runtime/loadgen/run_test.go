package loadgen

import (
	"context"
	"encoding/json"
	"testing"
	"testing/fstest"
)

const shortSpec = `
name: short
seed: 7
input: {kind: uniform, min: 4, max: 24}
output: {kind: fixed, value: 8}
slo: {preset: interactive-chat}
warmup: 200ms
phases:
  - {name: baseline, kind: baseline, duration: 300ms, arrival: {mode: closed, concurrency: 1}}
  - {name: ramp, kind: ramp, duration: 300ms, arrival: {mode: closed, concurrency: 1, concurrency_to: 4}}
  - {name: burst, kind: burst, duration: 300ms, arrival: {mode: burst, burst_size: 4, burst_every: 150ms, rate: 5}}
  - {name: recovery, kind: recovery, duration: 300ms, arrival: {mode: poisson, rate: 10}}
sweep: {mode: concurrency, min: 1, max: 4, trial: 200ms, max_trials: 3}
`

func TestRunShortSpec(t *testing.T) {
	e, cfg := openTiny(t)
	spec, err := ParseSpec([]byte(shortSpec))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), e, spec, Options{EngineConfig: cfg, PowerFS: fstest.MapFS{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Close() })
	rep := BuildReport(res)
	if len(rep.Phases) != 4 || rep.Overall.Requests == 0 {
		t.Fatalf("phases %d requests %d", len(rep.Phases), rep.Overall.Requests)
	}
	if rep.Sweep == nil || len(rep.Sweep.Points) == 0 {
		t.Fatal("no sweep points")
	}
	if rep.Power.EnergyJ != nil {
		t.Fatal("energy from an empty file system")
	}
	b, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema", "overall", "phases", "goodput_tok_s", "slo_attainment", "max_stable_concurrency", "power", "versions", "verdicts"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report.json lacks %q", k)
		}
	}
	ov := m["overall"].(map[string]any)
	for _, k := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"} {
		q, ok := ov[k].(map[string]any)
		if !ok {
			t.Fatalf("overall lacks %s", k)
		}
		for _, p := range []string{"p50", "p90", "p95", "p99", "p999"} {
			if _, ok := q[p]; !ok {
				t.Errorf("overall.%s lacks %s", k, p)
			}
		}
	}
	pw := m["power"].(map[string]any)
	if pw["energy_j"] != nil || pw["unavailable_reasons"] == nil {
		t.Errorf("power %v: want energy_j null with reasons", pw)
	}
	t.Logf("requests %d, ttft p50 %s ms p99 %s, goodput %s tok/s, max stable %v, status %s",
		rep.Overall.Requests, fmtPtr(rep.Overall.TTFTMs.P50, 1), fmtPtr(rep.Overall.TTFTMs.P99, 1),
		fmtPtr(rep.GoodputTokS, 1), rep.MaxStableConcurrency, rep.Status)
	for _, v := range rep.Verdicts {
		t.Logf("verdict %s: %s (%s)", v.Threshold, v.Status, v.Reason)
	}
}
