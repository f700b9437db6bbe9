package loadgen

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const validSpec = `
name: t
input: {kind: fixed, value: 8}
output: {kind: normal, mean: 10, stddev: 3, min: 2, max: 20}
phases:
  - {name: a, kind: baseline, duration: 1s, arrival: {mode: closed, concurrency: 1}}
`

func TestParseSpecErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, patch, want string
	}{
		{"rate", "  - {name: b, kind: burst, duration: 1s, arrival: {mode: poisson, rate: 0}}", "phases[1].arrival.rate: must be > 0"},
		{"duration", "  - {name: b, kind: ramp, duration: 0s, arrival: {mode: closed, concurrency: 2}}", "phases[1].duration: must be > 0"},
		{"kind", "  - {name: b, kind: storm, duration: 1s, arrival: {mode: closed, concurrency: 2}}", `phases[1].kind: must be baseline, ramp, burst, recovery or custom, not "storm"`},
		{"mode", "  - {name: b, kind: ramp, duration: 1s, arrival: {mode: open}}", "phases[1].arrival.mode"},
		{"dup", "  - {name: a, kind: ramp, duration: 1s, arrival: {mode: closed, concurrency: 2}}", `phases[1].name: duplicate phase "a"`},
		{"burst", "  - {name: b, kind: burst, duration: 1s, arrival: {mode: burst, burst_size: 0, burst_every: 1s}}", "phases[1].arrival.burst_size: must be ≥ 1"},
		{"metric", "thresholds: [{metric: ttft_ms.p42, max: 1}]", "thresholds[0].metric: unknown metric"},
		{"phase", "thresholds: [{metric: ttft_ms.p99, phase: nope, max: 1}]", `thresholds[0].phase: no phase named "nope"`},
		{"limits", "thresholds: [{metric: ttft_ms.p99}]", "thresholds[0]: needs max or min"},
		{"preset", "slo: {preset: gaming}", `slo.preset: unknown preset "gaming"`},
		{"unknown", "warmpu: 1s", `unknown field "warmpu"`},
		{"sweep", "sweep: {mode: concurrency, min: 0, max: 4, trial: 1s}", "sweep.min: must be a whole number ≥ 1"},
		{"duration text", "warmup: soon", `invalid duration "soon"`},
		{"dist", "input: {kind: uniform, min: 10, max: 5}", "input.max: must be ≥ min (10)"},
		{"class", "class: vip", `class: must be batch, interactive or realtime`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := validSpec + c.patch + "\n"
			if strings.HasPrefix(c.patch, "  -") {
				doc = validSpec + c.patch + "\n"
			} else if strings.HasPrefix(c.patch, "input:") {
				doc = strings.Replace(validSpec, "input: {kind: fixed, value: 8}", c.patch, 1)
			} else {
				doc = c.patch + "\n" + validSpec
			}
			_, err := ParseSpec([]byte(doc))
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("err %v, want ErrSpec", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestParseSpecPresetAndOverride(t *testing.T) {
	doc := "slo: {preset: interactive-chat, ttft: 500ms}\nthresholds: [{metric: ttft_ms.p99, max: 500}]\n" + validSpec
	s, err := ParseSpec([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if s.SLO.TTFT.D() != 500*time.Millisecond || s.SLO.TPOT.D() != 50*time.Millisecond || s.Class != "interactive" {
		t.Fatalf("slo %+v class %q", s.SLO, s.Class)
	}
	if len(s.Thresholds) != 2 || *s.Thresholds[0].Max != 500 || s.Thresholds[1].Metric != "itl_ms.p99" {
		t.Fatalf("thresholds %+v", s.Thresholds)
	}
	// JSON is YAML: the same spec as JSON parses too.
	if _, err := ParseSpec([]byte(`{"name":"j","input":{"kind":"fixed","value":4},"output":{"kind":"fixed","value":4},
		"phases":[{"name":"a","kind":"custom","duration":1.5,"arrival":{"mode":"poisson","rate":2}}]}`)); err != nil {
		t.Fatal(err)
	}
}

func TestProfilesValidate(t *testing.T) {
	for _, n := range ProfileNames() {
		s := Profiles[n]()
		if err := s.Resolve(); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	if err := DefaultSweep().validate("sweep"); len(err) > 0 {
		t.Fatal(err)
	}
}

func TestParseTrace(t *testing.T) {
	got, err := ParseTrace(strings.NewReader("# offsets\n0.5\n250ms\n\n1 # one second\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("got %v", got)
	}
	for _, bad := range []string{"-1\n", "soon\n", "NaN\n"} {
		if _, err := ParseTrace(strings.NewReader(bad)); !errors.Is(err, ErrTrace) {
			t.Errorf("%q: err %v, want ErrTrace", bad, err)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(validSpec))
	f.Add([]byte("phases: [{name: a, kind: burst, duration: 1, arrival: {mode: burst, burst_size: 3, burst_every: 0.5}}]"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSpec(b)
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("error %v does not wrap ErrSpec", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed spec fails validation: %v", err)
		}
	})
}

func FuzzParseTrace(f *testing.F) {
	f.Add("0.5\n1s\n# c\n")
	f.Fuzz(func(t *testing.T, s string) {
		offs, err := ParseTrace(strings.NewReader(s))
		if err != nil {
			return
		}
		for i, d := range offs {
			if d < 0 || (i > 0 && d < offs[i-1]) {
				t.Fatalf("offsets %v", offs)
			}
		}
	})
}
