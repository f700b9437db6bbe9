package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// Spec is a workload: what to send, how fast, for how long, and what the
// results must satisfy. It is plain data read from YAML or JSON (see the
// package documentation for the format); ParseSpec validates it.
type Spec struct {
	// Name labels the run in reports.
	Name string `json:"name"`
	// Model is the engine's model name; "" takes the first decoder.
	Model string `json:"model,omitempty"`
	// Seed makes prompt choice, lengths and Poisson arrivals reproducible.
	Seed uint64 `json:"seed,omitempty"`
	// Prompts says where prompt tokens come from.
	Prompts Prompts `json:"prompts"`
	// Input and Output are the prompt and output length distributions in
	// tokens (Output bounds generation; a model's end-of-sequence token
	// may end a request earlier, which the report counts).
	Input  Dist `json:"input"`
	Output Dist `json:"output"`
	// Class is the requests' priority class: batch, interactive, realtime.
	Class string `json:"class,omitempty"`
	// SLO is each request's objectives, optionally from a preset.
	SLO SLOSpec `json:"slo"`
	// FailFast is the share of requests (0 to 1, drawn with Seed) sent
	// fail-fast: refused at once (HTTP 429 with Retry-After) when the
	// engine predicts their TTFT objective cannot be met, rather than
	// queued; the rest queue. It needs slo.ttft.
	FailFast float64 `json:"fail_fast,omitempty"`
	// Recovery holds the goals of a burst-and-recovery run (phases of kind
	// baseline, burst and recovery, in that order); nil for the defaults
	// (see RecoveryGoals). The figures are reported whenever the phases are
	// there; the goals become verdicts when the run sends fail-fast
	// requests or this is set.
	Recovery *RecoveryGoals `json:"recovery,omitempty"`
	// Thresholds are the acceptance criteria judged into verdicts; a
	// preset's thresholds are added unless one with the same metric and
	// phase is declared here.
	Thresholds []Threshold `json:"thresholds,omitempty"`
	// Warmup runs one request at a time before the phases; its requests
	// are excluded from the statistics but give the unloaded latency that
	// tells an unreachable SLO from an overloaded one.
	Warmup Duration `json:"warmup,omitempty"`
	// Idle is how long the power sampler measures the idle baseline
	// before and after the run.
	Idle Duration `json:"idle,omitempty"`
	// Drain bounds the wait for requests still running after the last
	// phase; they are then cancelled (and counted as cancelled).
	Drain Duration `json:"drain,omitempty"`
	// RequestTimeout is each request's client deadline; zero means 60 s.
	RequestTimeout Duration `json:"request_timeout,omitempty"`
	// Window is the width of the jitter windows; zero means 5 s.
	Window Duration `json:"window,omitempty"`
	// Phases run in order.
	Phases []Phase `json:"phases"`
	// Sweep, when set, searches the max stable load after the phases.
	Sweep *Sweep `json:"sweep,omitempty"`
}

// Prompts selects prompt tokens: slices of the tokenised corpus files at
// random offsets, or (with no corpus, or a model without a tokenizer)
// synthetic uniform random ids.
type Prompts struct {
	Corpus []string `json:"corpus,omitempty"`
}

// Dist is a length distribution: fixed (Value), uniform on [Min, Max],
// or normal (Mean, Stddev) clipped to [Min, Max].
type Dist struct {
	Kind   string  `json:"kind"`
	Value  int     `json:"value,omitempty"`
	Min    int     `json:"min,omitempty"`
	Max    int     `json:"max,omitempty"`
	Mean   float64 `json:"mean,omitempty"`
	Stddev float64 `json:"stddev,omitempty"`
}

// SLOSpec is a request's objectives. Preset (interactive-chat,
// voice-agent, batch) fills the fields left zero and adds its thresholds.
type SLOSpec struct {
	Preset string   `json:"preset,omitempty"`
	TTFT   Duration `json:"ttft,omitempty"`
	TPOT   Duration `json:"tpot,omitempty"`
	E2E    Duration `json:"e2e,omitempty"`
}

// Threshold is one acceptance criterion: Metric (see Metrics) of Phase
// ("" for the whole run) must be ≤ Max and/or ≥ Min. MinSamples is the
// evidence needed for a pass; zero derives it from the metric (a p99 needs
// 100 samples, a p99.9 1000).
type Threshold struct {
	Metric     string   `json:"metric"`
	Phase      string   `json:"phase,omitempty"`
	Max        *float64 `json:"max,omitempty"`
	Min        *float64 `json:"min,omitempty"`
	MinSamples int      `json:"min_samples,omitempty"`
}

// Phase is one stretch of load. Kind labels it (baseline, ramp, burst,
// recovery, or custom); the load itself is its Arrival.
type Phase struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"`
	Duration Duration `json:"duration"`
	Arrival  Arrival  `json:"arrival"`
}

// Arrival is how requests arrive in a phase.
//
//   - closed: Concurrency clients each send a request when their previous
//     one ends; with ConcurrencyTo the client count moves linearly to it
//     over the phase (a ramp).
//   - poisson: independent arrivals at Rate per second, moving linearly to
//     RateTo when set.
//   - burst: BurstSize requests at once every BurstEvery, over a Poisson
//     background of Rate per second (Rate may be 0).
//   - trace: arrivals at the offsets listed in the file Trace (one per
//     line, seconds or a Go duration; '#' starts a comment).
type Arrival struct {
	Mode          string   `json:"mode"`
	Concurrency   int      `json:"concurrency,omitempty"`
	ConcurrencyTo int      `json:"concurrency_to,omitempty"`
	Rate          float64  `json:"rate,omitempty"`
	RateTo        float64  `json:"rate_to,omitempty"`
	BurstSize     int      `json:"burst_size,omitempty"`
	BurstEvery    Duration `json:"burst_every,omitempty"`
	Trace         string   `json:"trace,omitempty"`
}

// Sweep searches the highest closed-loop concurrency (Mode "concurrency")
// or Poisson rate (Mode "rate") at which the run's thresholds hold and
// the SLO attainment is at least MinAttainment: it doubles from Min until
// a trial fails or Max is reached, then bisects, one Trial-long run per
// point, at most MaxTrials runs.
type Sweep struct {
	Mode          string   `json:"mode"`
	Min           float64  `json:"min"`
	Max           float64  `json:"max"`
	Trial         Duration `json:"trial"`
	MaxTrials     int      `json:"max_trials,omitempty"`
	MinAttainment float64  `json:"min_attainment,omitempty"`
	// Resolution stops the bisection when hi − lo ≤ Resolution; zero
	// means 1 for concurrency and 5 % of Min for rate.
	Resolution float64 `json:"resolution,omitempty"`
}

// ParseSpec reads a spec from YAML or JSON (JSON is YAML), applies its
// preset and validates it. Unknown fields are errors, so a typo never
// silently falls back to a default.
func ParseSpec(data []byte) (Spec, error) {
	var raw any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	j, err := json.Marshal(normaliseYAML(raw))
	if err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	if err := s.Resolve(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// normaliseYAML turns YAML maps with non-string keys into string-keyed
// ones so that the document can be re-encoded as JSON.
func normaliseYAML(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normaliseYAML(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = normaliseYAML(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = normaliseYAML(e)
		}
		return x
	}
	return v
}

// Resolve applies the SLO preset (fields and thresholds the spec leaves
// unset) and validates the result.
func (s *Spec) Resolve() error {
	if s.SLO.Preset != "" {
		p, ok := Presets[s.SLO.Preset]
		if !ok {
			return fieldErr("slo.preset", "unknown preset %q (have %s)", s.SLO.Preset, strings.Join(PresetNames(), ", "))
		}
		if s.SLO.TTFT == 0 {
			s.SLO.TTFT = p.SLO.TTFT
		}
		if s.SLO.TPOT == 0 {
			s.SLO.TPOT = p.SLO.TPOT
		}
		if s.SLO.E2E == 0 {
			s.SLO.E2E = p.SLO.E2E
		}
		if s.Class == "" {
			s.Class = p.Class
		}
		for _, pt := range p.Thresholds {
			declared := false
			for _, t := range s.Thresholds {
				if t.Metric == pt.Metric && t.Phase == pt.Phase {
					declared = true
				}
			}
			if !declared {
				s.Thresholds = append(s.Thresholds, pt)
			}
		}
	}
	return s.Validate()
}

// fieldErr builds an ErrSpec error naming the field.
func fieldErr(field, format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrSpec, field, fmt.Sprintf(format, a...))
}

// Validate reports every invalid field, each error naming its field path.
func (s *Spec) Validate() error {
	var errs []error
	add := func(field, format string, a ...any) { errs = append(errs, fieldErr(field, format, a...)) }
	errs = append(errs, s.Input.validate("input", 1)...)
	errs = append(errs, s.Output.validate("output", 1)...)
	switch s.Class {
	case "", "batch", "interactive", "realtime":
	default:
		add("class", "must be batch, interactive or realtime, not %q", s.Class)
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"slo.ttft", s.SLO.TTFT}, {"slo.tpot", s.SLO.TPOT}, {"slo.e2e", s.SLO.E2E},
		{"warmup", s.Warmup}, {"idle", s.Idle}, {"drain", s.Drain},
		{"request_timeout", s.RequestTimeout}, {"window", s.Window}} {
		if d.v < 0 {
			add(d.name, "must be ≥ 0")
		}
	}
	if !(s.FailFast >= 0 && s.FailFast <= 1) {
		add("fail_fast", "must be a share between 0 and 1, not %v", s.FailFast)
	} else if s.FailFast > 0 && s.SLO.TTFT <= 0 {
		add("fail_fast", "needs slo.ttft: a fail-fast request is refused against its TTFT objective")
	}
	for i, c := range s.Prompts.Corpus {
		if strings.TrimSpace(c) == "" {
			add(fmt.Sprintf("prompts.corpus[%d]", i), "must name a file")
		}
	}
	if len(s.Phases) == 0 {
		add("phases", "must list at least one phase")
	}
	names := map[string]bool{}
	for i, p := range s.Phases {
		f := fmt.Sprintf("phases[%d]", i)
		if p.Name == "" {
			add(f+".name", "must be set")
		} else if names[p.Name] {
			add(f+".name", "duplicate phase %q", p.Name)
		}
		names[p.Name] = true
		switch p.Kind {
		case "baseline", "ramp", "burst", "recovery", "custom":
		default:
			add(f+".kind", "must be baseline, ramp, burst, recovery or custom, not %q", p.Kind)
		}
		if p.Duration <= 0 {
			add(f+".duration", "must be > 0")
		}
		errs = append(errs, p.Arrival.validate(f+".arrival")...)
	}
	for i, t := range s.Thresholds {
		f := fmt.Sprintf("thresholds[%d]", i)
		if err := checkMetric(t.Metric); err != nil {
			add(f+".metric", "%v", err)
		}
		if t.Phase != "" && !names[t.Phase] {
			add(f+".phase", "no phase named %q", t.Phase)
		}
		if t.Max == nil && t.Min == nil {
			add(f, "needs max or min")
		}
		for _, v := range []*float64{t.Max, t.Min} {
			if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
				add(f, "limits must be finite")
			}
		}
		if t.MinSamples < 0 {
			add(f+".min_samples", "must be ≥ 0")
		}
	}
	if s.Sweep != nil {
		errs = append(errs, s.Sweep.validate("sweep")...)
	}
	return errors.Join(errs...)
}

func (d Dist) validate(field string, floor int) []error {
	var errs []error
	add := func(sub, format string, a ...any) { errs = append(errs, fieldErr(field+sub, format, a...)) }
	switch d.Kind {
	case "fixed":
		if d.Value < floor {
			add(".value", "must be ≥ %d", floor)
		}
	case "uniform", "normal":
		if d.Min < floor {
			add(".min", "must be ≥ %d", floor)
		}
		if d.Max < d.Min {
			add(".max", "must be ≥ min (%d)", d.Min)
		}
		if d.Kind == "normal" {
			if d.Stddev <= 0 || math.IsNaN(d.Stddev) {
				add(".stddev", "must be > 0")
			}
			if math.IsNaN(d.Mean) || math.IsInf(d.Mean, 0) {
				add(".mean", "must be finite")
			}
		}
	case "":
		add(".kind", "missing: set %s to {kind: fixed, value: N}, {kind: uniform, min: A, max: B} or {kind: normal, ...}", field)
	default:
		add(".kind", "must be fixed, uniform or normal, not %q", d.Kind)
	}
	return errs
}

// upper is the largest length d can produce.
func (d Dist) upper() int {
	if d.Kind == "fixed" {
		return d.Value
	}
	return d.Max
}

func (a Arrival) validate(field string) []error {
	var errs []error
	add := func(sub, format string, x ...any) { errs = append(errs, fieldErr(field+sub, format, x...)) }
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch a.Mode {
	case "closed":
		if a.Concurrency < 1 {
			add(".concurrency", "must be ≥ 1")
		}
		if a.ConcurrencyTo < 0 {
			add(".concurrency_to", "must be ≥ 1 when set")
		}
	case "poisson":
		if !(a.Rate > 0) || !finite(a.Rate) {
			add(".rate", "must be > 0")
		}
		if a.RateTo < 0 || !finite(a.RateTo) {
			add(".rate_to", "must be > 0 when set")
		}
	case "burst":
		if a.BurstSize < 1 {
			add(".burst_size", "must be ≥ 1")
		}
		if a.BurstEvery <= 0 {
			add(".burst_every", "must be > 0")
		}
		if a.Rate < 0 || !finite(a.Rate) {
			add(".rate", "must be ≥ 0")
		}
	case "trace":
		if a.Trace == "" {
			add(".trace", "must name a file of arrival offsets")
		}
	default:
		add(".mode", "must be closed, poisson, burst or trace, not %q", a.Mode)
	}
	return errs
}

func (w *Sweep) validate(field string) []error {
	var errs []error
	add := func(sub, format string, x ...any) { errs = append(errs, fieldErr(field+sub, format, x...)) }
	switch w.Mode {
	case "concurrency":
		if w.Min < 1 || w.Min != math.Trunc(w.Min) {
			add(".min", "must be a whole number ≥ 1")
		}
	case "rate":
		if !(w.Min > 0) {
			add(".min", "must be > 0")
		}
	default:
		add(".mode", "must be concurrency or rate, not %q", w.Mode)
	}
	if !(w.Max >= w.Min) || math.IsInf(w.Max, 0) {
		add(".max", "must be ≥ min")
	}
	if w.Trial <= 0 {
		add(".trial", "must be > 0")
	}
	if w.MaxTrials < 0 {
		add(".max_trials", "must be ≥ 0")
	}
	if w.MinAttainment < 0 || w.MinAttainment > 1 {
		add(".min_attainment", "must be in [0, 1]")
	}
	if w.Resolution < 0 {
		add(".resolution", "must be ≥ 0")
	}
	return errs
}

// defaults returns the spec's durations with their zero values replaced.
func (s *Spec) requestTimeout() time.Duration {
	if s.RequestTimeout > 0 {
		return s.RequestTimeout.D()
	}
	return time.Minute
}

func (s *Spec) window() time.Duration {
	if s.Window > 0 {
		return s.Window.D()
	}
	return 5 * time.Second
}

func (s *Spec) drain() time.Duration {
	if s.Drain > 0 {
		return s.Drain.D()
	}
	return 10 * time.Second
}
