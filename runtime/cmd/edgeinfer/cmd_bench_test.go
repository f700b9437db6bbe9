package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/bundletest"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
)

// benchSpecYAML is a ~3 s workload through the four phases with a short
// concurrency sweep, small enough for the tiny-test preset on two cores.
const benchSpecYAML = `
name: cli-short
seed: 3
input: {kind: uniform, min: 4, max: 24}
output: {kind: fixed, value: 8}
slo: {preset: interactive-chat}
warmup: 200ms
idle: 100ms
phases:
  - {name: baseline, kind: baseline, duration: 400ms, arrival: {mode: closed, concurrency: 1}}
  - {name: ramp, kind: ramp, duration: 400ms, arrival: {mode: closed, concurrency: 1, concurrency_to: 4}}
  - {name: burst, kind: burst, duration: 400ms, arrival: {mode: burst, burst_size: 4, burst_every: 200ms, rate: 5}}
  - {name: recovery, kind: recovery, duration: 400ms, arrival: {mode: poisson, rate: 10}}
sweep: {mode: concurrency, min: 1, max: 4, trial: 250ms, max_trials: 3}
`

func runBenchCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), &stdout, &stderr, append([]string{"bench"}, args...))
	return code, stdout.String(), stderr.String()
}

func writeBenchFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBenchCommand runs `edgeinfer bench --spec FILE --sweep` in-process on
// the tiny-test preset and checks the three reports and report.json's
// required keys.
func TestBenchCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3 s benchmark")
	}
	orttest.Need(t)
	dir := t.TempDir()
	model := bundletest.Decoder(t, "tiny-test", llama.Options{}).Dir
	spec := writeBenchFile(t, dir, "spec.yaml", benchSpecYAML)
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runBenchCLI("--spec", spec, "--sweep", "--model", model, "--out", out, "--threads", "1", "--kv-budget", "8388608")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"== cli-short: ", "TTFT          p50 ", "goodput ", "max stable ", "verdict ", "report: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	for _, f := range []string{"report.json", "report.md", "report.html"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	html, _ := os.ReadFile(filepath.Join(out, "report.html"))
	if !bytes.Contains(html, []byte("<svg")) || !bytes.Contains(html, []byte("Timeline")) {
		t.Error("report.html has no SVG timeline")
	}

	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema", "goodput_tok_s", "slo_attainment", "max_stable_concurrency", "power", "versions", "verdicts"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("report.json lacks %q", k)
		}
	}
	if rep["max_stable_concurrency"] == nil && rep["sweep"] == nil {
		t.Error("--sweep ran no sweep")
	}
	checkDists := func(where string, m map[string]any) {
		t.Helper()
		for _, d := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"} {
			q, ok := m[d].(map[string]any)
			if !ok {
				t.Errorf("%s lacks %s", where, d)
				continue
			}
			for _, p := range []string{"p50", "p90", "p95", "p99", "p999"} {
				if _, ok := q[p]; !ok {
					t.Errorf("%s.%s lacks %s", where, d, p)
				}
			}
		}
		for _, k := range []string{"goodput_tok_s", "slo_attainment"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s lacks %s", where, k)
			}
		}
	}
	checkDists("overall", rep["overall"].(map[string]any))
	phases, _ := rep["phases"].([]any)
	if len(phases) != 4 {
		t.Fatalf("%d phases, want 4", len(phases))
	}
	for _, p := range phases {
		pm := p.(map[string]any)
		checkDists("phases["+pm["name"].(string)+"]", pm)
	}

	pw := rep["power"].(map[string]any)
	for _, k := range []string{"energy_j", "unavailable_reasons", "sources"} {
		if _, ok := pw[k]; !ok {
			t.Errorf("power lacks %q", k)
		}
	}
	// On a machine without a sensor (this project's VMs) energy is null
	// with the reasons; where a sensor exists it must be a number.
	if srcs, _ := pw["sources"].([]any); len(srcs) == 0 {
		if reasons, _ := pw["unavailable_reasons"].([]any); pw["energy_j"] != nil || len(reasons) == 0 {
			t.Errorf("no sensor: energy_j %v, reasons %v; want null with reasons", pw["energy_j"], reasons)
		}
	}

	vers := rep["versions"].(map[string]any)
	for _, k := range []string{"sdk", "commit", "board", "cpu_model", "intra_op_threads", "kv_budget_bytes", "prefix_cache", "sched", "models"} {
		if _, ok := vers[k]; !ok {
			t.Errorf("versions lacks %q (have %v)", k, benchKeys(vers))
		}
	}
	if th, _ := vers["intra_op_threads"].(float64); th != 1 {
		t.Errorf("versions.intra_op_threads = %v, want --threads 1", vers["intra_op_threads"])
	}
	models, _ := vers["models"].([]any)
	if len(models) != 1 {
		t.Fatalf("versions.models: %v", vers["models"])
	}
	m0 := models[0].(map[string]any)
	for _, k := range []string{"name", "digest", "provider", "onnxruntime_version", "kv"} {
		if v, ok := m0[k]; !ok || v == "" {
			t.Errorf("versions.models[0] lacks %q (have %v)", k, benchKeys(m0))
		}
	}
	verdicts, _ := rep["verdicts"].([]any)
	if len(verdicts) != 2 { // the interactive-chat preset's TTFT and ITL limits
		t.Fatalf("%d verdicts, want 2", len(verdicts))
	}
	for _, v := range verdicts {
		vm := v.(map[string]any)
		switch vm["status"] {
		case "pass", "retest", "block":
		default:
			t.Errorf("verdict %v", vm)
		}
		if vm["reason"] == "" {
			t.Errorf("verdict without reason: %v", vm)
		}
	}
}

func benchKeys(m map[string]any) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

// TestBenchBadSpec: an invalid spec fails before any model is opened, with
// an error naming the field.
func TestBenchBadSpec(t *testing.T) {
	dir := t.TempDir()
	const phase = `{name: a, kind: baseline, duration: 1s, arrival: {mode: closed, concurrency: 1}}`
	for _, c := range []struct {
		name, spec, want string
	}{
		{"zero duration", `phases: [{name: a, kind: baseline, duration: 0s, arrival: {mode: closed, concurrency: 1}}]`, "phases[0].duration: must be > 0"},
		{"unknown kind", `phases: [{name: a, kind: spike, duration: 1s, arrival: {mode: closed, concurrency: 1}}]`, "phases[0].kind"},
		{"unknown metric", "thresholds: [{metric: ttft_ms.p98, max: 1}]\nphases: [" + phase + "]", "thresholds[0].metric"},
		{"unknown preset", "slo: {preset: gaming}\nphases: [" + phase + "]", "slo.preset"},
		{"typo", "phasse: [" + phase + "]", "phasse"},
		{"bad duration", `phases: [{name: a, kind: baseline, duration: soon, arrival: {mode: closed, concurrency: 1}}]`, "soon"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := writeBenchFile(t, dir, strings.ReplaceAll(c.name, " ", "_")+".yaml", c.spec)
			code, stdout, stderr := runBenchCLI("--spec", spec, "--model", filepath.Join(dir, "absent"), "--out", filepath.Join(dir, "out"))
			if code == 0 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, spec) {
				t.Fatalf("exit %d, stderr %q (want the file and %q), stdout %q", code, stderr, c.want, stdout)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Error("a bad spec wrote a report")
	}
}
