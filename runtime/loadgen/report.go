package loadgen

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

// Schema is the version of report.json's layout. A change that removes or
// renames a field bumps it.
const Schema = "edgeinfer.bench/v1"

// Report is report.json: the run's figures per phase and overall, the
// sweep, power, the version matrix and a verdict per threshold.
type Report struct {
	Schema   string           `json:"schema"`
	Name     string           `json:"name"`
	Model    string           `json:"model"`
	Started  time.Time        `json:"started"`
	WallS    float64          `json:"wall_s"`
	Status   string           `json:"status"`
	Workload Workload         `json:"workload"`
	Overall  PhaseReport      `json:"overall"`
	Phases   []PhaseReport    `json:"phases"`
	Warmup   *metrics.Summary `json:"warmup"`
	// MaxStableConcurrency (or MaxStableRate, for a rate sweep) is the
	// highest load at which the SLOs held; null when not swept or when
	// no load was stable.
	MaxStableConcurrency *int     `json:"max_stable_concurrency"`
	MaxStableRate        *float64 `json:"max_stable_rate"`
	// MaxStableIsLowerBound is set when the sweep stopped while still
	// stable: the limit is at least the figure above, not the figure
	// (sweep.stopped says why it stopped).
	MaxStableIsLowerBound bool         `json:"max_stable_is_lower_bound"`
	Sweep                 *SweepResult `json:"sweep"`
	// The run-wide headline figures, repeated from Overall.
	GoodputTokS   *float64        `json:"goodput_tok_s"`
	SLOAttainment *float64        `json:"slo_attainment"`
	Power         PowerReport     `json:"power"`
	Memory        *metrics.Memory `json:"memory"`
	// Recovery is the burst-and-recovery figures of a run with baseline,
	// burst and recovery phases; null otherwise.
	Recovery *RecoveryReport `json:"recovery"`
	// Resources is the engine's footprint per window (RSS, goroutines,
	// KV blocks) and the RSS trend: a leak shows here.
	Resources    *ResourceReport `json:"resources"`
	Versions     Versions        `json:"versions"`
	Verdicts     []Verdict       `json:"verdicts"`
	ClientErrors map[string]int  `json:"client_errors"`
	Timeline     []TimelinePoint `json:"timeline"`
	Requests     []RequestPoint  `json:"requests"`
	Notes        []string        `json:"notes"`
	Spec         Spec            `json:"spec"`
}

// Workload describes what was sent.
type Workload struct {
	Prompts string  `json:"prompts"`
	Class   string  `json:"class"`
	SLO     SLOSpec `json:"slo"`
	Input   Dist    `json:"input"`
	Output  Dist    `json:"output"`
}

// PhaseReport is one phase's (or the whole run's) summary with its place
// in the run.
type PhaseReport struct {
	Name    string  `json:"name"`
	Kind    string  `json:"kind"`
	StartS  float64 `json:"start_s"`
	EndS    float64 `json:"end_s"`
	Arrival Arrival `json:"arrival"`
	metrics.Summary
}

// TimelinePoint is one sample of engine state, at T seconds into the run.
type TimelinePoint struct {
	T       float64 `json:"t_s"`
	Queued  int     `json:"queued"`
	Running int     `json:"running"`
	TokS    float64 `json:"decode_tok_s"`
}

// RequestPoint is one request for the charts: arrival offset, phase and
// latencies (null when not produced).
type RequestPoint struct {
	T       float64  `json:"t_s"`
	Phase   int      `json:"phase"`
	Outcome string   `json:"outcome"`
	TTFTMs  *float64 `json:"ttft_ms"`
	TPOTMs  *float64 `json:"tpot_ms"`
	QueueMs *float64 `json:"queue_ms"`
}

// maxRequestPoints bounds the per-request chart (and report.json's
// requests): a longer run shows every n-th request.
const maxRequestPoints = 5000

// BuildReport digests a run.
func BuildReport(res *Result) *Report {
	s := &res.Spec
	rep := &Report{Schema: Schema, Name: s.Name, Model: res.Model, Started: res.Start,
		WallS: res.End.Sub(res.Start).Seconds(), Spec: *s,
		Power: PowerReport{Report: res.Power,
			TraceW: downsample(res.PowerTrace, res.Start, res.End, maxTracePoints),
			TempC:  downsample(res.TempTrace, res.Start, res.End, maxTracePoints)},
		Versions: collectVersions(res), ClientErrors: res.ClientErrors, Notes: slices.Clone(res.Notes),
		Workload: Workload{Prompts: res.PromptSource, Class: classOf(s.Class).String(), SLO: s.SLO, Input: s.Input, Output: s.Output}}
	mem := memoryOf(res)
	rep.Memory = mem
	opts := metrics.SummaryOptions{Window: s.window(), MinWindowSamples: 5}
	summary := func(a *metrics.Accumulator, start time.Time) metrics.Summary {
		if a == nil {
			o := opts
			o.Start = start
			return metrics.Summarize(nil, o)
		}
		return a.Summary()
	}
	for _, p := range res.Phases {
		rep.Phases = append(rep.Phases, PhaseReport{Name: p.Phase.Name, Kind: p.Phase.Kind,
			StartS: p.Start.Sub(res.Start).Seconds(), EndS: p.End.Sub(res.Start).Seconds(), Arrival: p.Phase.Arrival, Summary: summary(p.Requests, p.Start)})
	}
	if len(res.Phases) > 0 {
		if res.Overall != nil {
			res.Overall.SetMemory(mem)
		}
		rep.Overall = PhaseReport{Name: "overall", Kind: "overall",
			StartS: res.Phases[0].Start.Sub(res.Start).Seconds(),
			EndS:   res.Phases[len(res.Phases)-1].End.Sub(res.Start).Seconds(), Summary: summary(res.Overall, res.Phases[0].Start)}
	}
	rep.GoodputTokS, rep.SLOAttainment = rep.Overall.GoodputTokS, rep.Overall.SLOAttainment
	if res.Warmup != nil {
		if w := res.Warmup.Summary(); w.Requests > 0 {
			rep.Warmup = &w
		}
	}
	if res.TimelineFile != "" && res.Requests > 0 {
		pts, err := readRequestPoints(res.TimelineFile, res.Requests, maxRequestPoints, res.Start)
		if err != nil {
			rep.Notes = append(rep.Notes, err.Error())
		}
		rep.Requests = pts
		if len(pts) < res.Requests {
			rep.Notes = append(rep.Notes, fmt.Sprintf("the request chart shows %d of the %d requests (every %d-th); %s holds them all",
				len(pts), res.Requests, (res.Requests+maxRequestPoints-1)/maxRequestPoints, res.TimelineFile))
		}
	}
	if sw := res.Sweep; sw != nil {
		rep.Sweep = sw
		if sw.MaxStable != nil {
			if sw.Mode == "concurrency" {
				c := int(*sw.MaxStable)
				rep.MaxStableConcurrency = &c
			} else {
				rep.MaxStableRate = sw.MaxStable
			}
		}
		if sw.LowerBound {
			rep.MaxStableIsLowerBound = true
			rep.Notes = append(rep.Notes, "max stable load "+sw.MaxStableText()+": the sweep found no unstable load, so the limit is not known")
		}
	}
	rep.Timeline = timelineOf(res)
	rep.Resources = resourceReport(res, s.window().Seconds(), res.Target != nil)
	for _, t := range s.Thresholds {
		sum := &rep.Overall.Summary
		for i := range rep.Phases {
			if rep.Phases[i].Name == t.Phase {
				sum = &rep.Phases[i].Summary
			}
		}
		rep.Verdicts = append(rep.Verdicts, judge(t, sum, rep.Warmup, res.Sweep, &res.Power))
	}
	if rec, err := recoveryReport(res); err != nil {
		rep.Notes = append(rep.Notes, err.Error())
	} else if rec != nil {
		rep.Recovery = rec
		// Its goals are about admission's promises: judged when the run
		// sent fail-fast requests or declared them.
		if s.FailFast > 0 || s.Recovery != nil {
			rep.Verdicts = append(rep.Verdicts, rec.verdicts()...)
		}
	}
	rep.Status = Pass
	for _, v := range rep.Verdicts {
		if v.Status == Block || (v.Status == Retest && rep.Status == Pass) {
			rep.Status = v.Status
		}
	}
	if len(rep.Verdicts) == 0 {
		rep.Status = Retest
		rep.Notes = append(rep.Notes, "no thresholds declared: nothing was judged")
	}
	if n := rep.Overall.Outcomes[metrics.Completed]; n > 0 && s.Output.Kind != "" {
		mean := float64(rep.Overall.OutputTokens) / float64(max(rep.Overall.Requests, 1))
		rep.Notes = append(rep.Notes, fmt.Sprintf("output lengths are upper bounds (the model may end a request at its end-of-sequence token): %.1f tokens per request on average", mean))
	}
	return rep
}

func requestPoint(t *metrics.Timeline, start time.Time, phase int) RequestPoint {
	p := RequestPoint{T: t.Arrived.Sub(start).Seconds(), Phase: phase, Outcome: string(t.Outcome)}
	ms := func(d time.Duration, ok bool) *float64 {
		if !ok {
			return nil
		}
		v := float64(d) / 1e6
		return &v
	}
	p.TTFTMs = ms(t.TTFT())
	p.TPOTMs = ms(t.TPOT())
	p.QueueMs = ms(t.Queue())
	return p
}

func timelineOf(res *Result) []TimelinePoint {
	var out []TimelinePoint
	for i, p := range res.Series {
		tp := TimelinePoint{T: p.At.Sub(res.Start).Seconds(), Queued: p.Queued, Running: p.Running}
		if i > 0 {
			prev := res.Series[i-1]
			if dt := p.At.Sub(prev.At).Seconds(); dt > 0 {
				tp.TokS = float64(p.DecodeTokens-prev.DecodeTokens) / dt
			}
		}
		out = append(out, tp)
	}
	return out
}

// memoryOf reads the model's KV cache figures (weight bytes are not
// known to the engine's stats and stay 0, "not reported").
func memoryOf(res *Result) *metrics.Memory {
	kv, ok := res.KV[res.Model]
	if !ok || kv.BlockSize == 0 {
		return nil
	}
	return &metrics.Memory{
		KVBytesPerToken: kv.BlockBytes / int64(kv.BlockSize),
		KVCapacityBytes: kv.BytesTotal,
		KVUsedBytes:     kv.BytesUsed,
		KVPeakBytes:     int64(kv.PeakBlocksUsed) * kv.BlockBytes,
		KVBlocksUsed:    kv.BlocksUsed,
		KVBlocksTotal:   kv.BlocksTotal,
	}
}

// JSON encodes the report, indented.
func (r *Report) JSON() ([]byte, error) {
	return json.MarshalIndent(r, "", "  ")
}
