package metrics

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"
)

// SummaryOptions selects the span and windows of a Summary. The zero value
// summarises everything with no windows.
type SummaryOptions struct {
	// Start and End bound the wall time that rates divide by. Zero values
	// are derived: the earliest arrival and the latest finish or token.
	Start, End time.Time
	// Window, when positive, splits [Start, End) into fixed windows.
	Window time.Duration
	// MinWindowSamples is the fewest TTFT samples a window needs to enter
	// the jitter statistics; zero means 1.
	MinWindowSamples int
	// RelativeError of the histograms; zero means DefaultRelativeError.
	RelativeError float64
	// Memory gauges to carry into the summary, if any.
	Memory *Memory
}

// Summary is the JSON-ready digest of a set of timelines. Latencies are in
// milliseconds; rates are nil (null) when the wall time is zero.
type Summary struct {
	Start          time.Time       `json:"start"`
	End            time.Time       `json:"end"`
	WallS          float64         `json:"wall_s"`
	Requests       int             `json:"requests"`
	Outcomes       map[Outcome]int `json:"outcomes"`
	MetSLO         int             `json:"met_slo"`
	SLOAttainment  *float64        `json:"slo_attainment"`
	PromptTokens   int64           `json:"prompt_tokens"`
	OutputTokens   int64           `json:"output_tokens"`
	GoodTokens     int64           `json:"good_tokens"`
	GoodputTokS    *float64        `json:"goodput_tok_s"`
	ThroughputTokS *float64        `json:"throughput_tok_s"`
	CompletedPerS  *float64        `json:"completed_per_s"`
	Preemptions    int             `json:"preemptions"`
	Latency
	Classes []ClassStats `json:"classes"`
	Windows []Window     `json:"windows,omitempty"`
	Jitter  *Jitter      `json:"jitter,omitempty"`
	Memory  *Memory      `json:"memory,omitempty"`
}

// Latency holds the five per-request latency distributions, in ms.
type Latency struct {
	TTFTMs  Quantiles `json:"ttft_ms"`
	TPOTMs  Quantiles `json:"tpot_ms"`
	ITLMs   Quantiles `json:"itl_ms"`
	E2EMs   Quantiles `json:"e2e_ms"`
	QueueMs Quantiles `json:"queue_ms"`
}

// ClassStats are the counts, rates and latencies of one request class.
// Rates divide by every request of the class, whatever its outcome.
type ClassStats struct {
	Class         string          `json:"class"`
	Requests      int             `json:"requests"`
	Outcomes      map[Outcome]int `json:"outcomes"`
	MetSLO        int             `json:"met_slo"`
	SLOAttainment *float64        `json:"slo_attainment"`
	TimeoutRate   *float64        `json:"timeout_rate"`
	ErrorRate     *float64        `json:"error_rate"`
	RejectRate    *float64        `json:"reject_rate"`
	CancelRate    *float64        `json:"cancel_rate"`
	GoodTokens    int64           `json:"good_tokens"`
	GoodputTokS   *float64        `json:"goodput_tok_s"`
	Latency
}

// Window is one fixed window: requests are assigned by arrival time (what
// a user arriving then experienced); tokens by their emission time.
type Window struct {
	StartS         float64  `json:"start_s"` // offset from Summary.Start
	Requests       int      `json:"requests"`
	MetSLO         int      `json:"met_slo"`
	SLOAttainment  *float64 `json:"slo_attainment"`
	Tokens         int64    `json:"tokens"`
	GoodTokens     int64    `json:"good_tokens"`
	ThroughputTokS float64  `json:"throughput_tok_s"`
	GoodputTokS    float64  `json:"goodput_tok_s"`
	Latency
}

// Jitter measures how the per-window p99s move across windows.
type Jitter struct {
	TTFTP99 Spread `json:"ttft_p99_ms"`
	TPOTP99 Spread `json:"tpot_p99_ms"`
}

// Spread describes a set of per-window values: their stddev, extremes, and
// the ratio of their p99 to their p50 (1 = perfectly steady).
type Spread struct {
	Windows    int      `json:"windows"`
	Mean       *float64 `json:"mean"`
	Stddev     *float64 `json:"stddev"`
	Min        *float64 `json:"min"`
	Max        *float64 `json:"max"`
	P99OverP50 *float64 `json:"p99_over_p50"`
}

// dists accumulates the five latency histograms.
type dists struct{ ttft, tpot, itl, e2e, queue *Histogram }

func newDists(relErr float64) dists {
	return dists{NewHistogram(relErr), NewHistogram(relErr), NewHistogram(relErr), NewHistogram(relErr), NewHistogram(relErr)}
}

func (d dists) add(t *Timeline) {
	if v, ok := t.TTFT(); ok {
		d.ttft.Record(ms(v))
	}
	if v, ok := t.TPOT(); ok {
		d.tpot.Record(ms(v))
	}
	for g := range t.ITL {
		d.itl.Record(ms(g))
	}
	if v, ok := t.E2E(); ok {
		d.e2e.Record(ms(v))
	}
	if v, ok := t.Queue(); ok {
		d.queue.Record(ms(v))
	}
}

func (d dists) latency() Latency {
	return Latency{QuantilesOf(d.ttft), QuantilesOf(d.tpot), QuantilesOf(d.itl), QuantilesOf(d.e2e), QuantilesOf(d.queue)}
}

// Summarize digests timelines. Every timeline counts in Requests and in the
// SLO attainment denominator, whatever its outcome. It is an Accumulator fed
// every timeline, its start (when not given) the earliest arrival.
func Summarize(tls []*Timeline, opt SummaryOptions) Summary {
	if opt.Start.IsZero() {
		for _, t := range tls {
			if !t.Arrived.IsZero() && (opt.Start.IsZero() || t.Arrived.Before(opt.Start)) {
				opt.Start = t.Arrived
			}
		}
	}
	a := NewAccumulator(opt)
	for _, t := range tls {
		a.Add(t)
	}
	return a.Summary()
}

// Accumulator is Summarize over a stream of timelines: it keeps counts and
// mergeable histograms (overall, per class, per window), never the
// timelines, so its memory grows with the number of classes and windows,
// not of requests — what a run of any length needs. Timelines may come in
// any order. Not safe for concurrent use.
type Accumulator struct {
	opt        SummaryOptions
	start, end time.Time
	s          Summary
	all        dists
	classes    map[string]*classAcc
	// ws and wd are the windows from opt.Start, grown as timelines reach
	// them; Summary cuts them at the end.
	ws []Window
	wd []dists
}

// NewAccumulator returns an empty accumulator. Windows (opt.Window > 0)
// count from opt.Start, which must then be set; a zero End is the latest
// finish or token added.
func NewAccumulator(opt SummaryOptions) *Accumulator {
	return &Accumulator{opt: opt, start: opt.Start, end: opt.End, all: newDists(opt.RelativeError),
		classes: map[string]*classAcc{}, s: Summary{Outcomes: map[Outcome]int{}}}
}

// Add accounts one finished timeline; a does not keep t.
func (a *Accumulator) Add(t *Timeline) {
	if a.opt.Start.IsZero() && !t.Arrived.IsZero() && (a.start.IsZero() || t.Arrived.Before(a.start)) {
		a.start = t.Arrived
	}
	if a.opt.End.IsZero() {
		last := t.Finished
		if n := len(t.Tokens); n > 0 && t.Arrived.Add(t.Tokens[n-1]).After(last) {
			last = t.Arrived.Add(t.Tokens[n-1])
		}
		if last.After(a.end) {
			a.end = last
		}
	}
	s := &a.s
	met := t.MetSLO()
	s.Requests++
	s.Outcomes[t.Outcome]++
	s.PromptTokens += int64(t.PromptTokens)
	s.OutputTokens += int64(t.OutputTokens)
	s.Preemptions += t.Preempted
	if met {
		s.MetSLO++
		s.GoodTokens += int64(t.OutputTokens)
	}
	a.all.add(t)
	c := a.classes[t.Class]
	if c == nil {
		c = &classAcc{d: newDists(a.opt.RelativeError), st: ClassStats{Class: t.Class, Outcomes: map[Outcome]int{}}}
		a.classes[t.Class] = c
	}
	c.st.Requests++
	c.st.Outcomes[t.Outcome]++
	if met {
		c.st.MetSLO++
		c.st.GoodTokens += int64(t.OutputTokens)
	}
	c.d.add(t)
	if a.opt.Window > 0 && !a.opt.Start.IsZero() {
		a.addWindows(t, met)
	}
}

// window returns the window holding at, growing the list; ok is false
// before the start.
func (a *Accumulator) window(at time.Time) (int, bool) {
	if at.Before(a.opt.Start) || (!a.opt.End.IsZero() && !at.Before(a.opt.End)) {
		return 0, false
	}
	i := int(at.Sub(a.opt.Start) / a.opt.Window)
	for len(a.ws) <= i {
		a.ws = append(a.ws, Window{StartS: (time.Duration(len(a.ws)) * a.opt.Window).Seconds()})
		a.wd = append(a.wd, newDists(a.opt.RelativeError))
	}
	return i, true
}

func (a *Accumulator) addWindows(t *Timeline, met bool) {
	if i, ok := a.window(t.Arrived); ok {
		a.ws[i].Requests++
		if met {
			a.ws[i].MetSLO++
		}
		a.wd[i].add(t)
	}
	for _, off := range t.Tokens {
		if i, ok := a.window(t.Arrived.Add(off)); ok {
			a.ws[i].Tokens++
			if met {
				a.ws[i].GoodTokens++
			}
		}
	}
}

// Summary digests what was added so far.
func (a *Accumulator) Summary() Summary {
	start, end, opt := a.start, a.end, a.opt
	wall := 0.0
	if !start.IsZero() && end.After(start) {
		wall = end.Sub(start).Seconds()
	}
	s := a.s
	s.Start, s.End, s.WallS = start, end, wall
	s.Outcomes = maps.Clone(a.s.Outcomes)
	s.Latency = a.all.latency()
	s.SLOAttainment = ratio(float64(s.MetSLO), float64(s.Requests))
	s.GoodputTokS = ratio(float64(s.GoodTokens), wall)
	s.ThroughputTokS = ratio(float64(s.OutputTokens), wall)
	s.CompletedPerS = ratio(float64(s.Outcomes[Completed]), wall)
	s.Classes = nil
	for _, c := range a.classes {
		st := c.st
		st.Outcomes = maps.Clone(c.st.Outcomes)
		n := float64(st.Requests)
		st.SLOAttainment = ratio(float64(st.MetSLO), n)
		st.TimeoutRate = ratio(float64(st.Outcomes[TimedOut]), n)
		st.ErrorRate = ratio(float64(st.Outcomes[Failed]), n)
		st.RejectRate = ratio(float64(st.Outcomes[Rejected]), n)
		st.CancelRate = ratio(float64(st.Outcomes[Cancelled]), n)
		st.GoodputTokS = ratio(float64(st.GoodTokens), wall)
		st.Latency = c.d.latency()
		s.Classes = append(s.Classes, st)
	}
	slices.SortFunc(s.Classes, func(a, b ClassStats) int { return cmp.Compare(a.Class, b.Class) })
	if opt.Window > 0 && wall > 0 {
		s.Windows = a.windows(start, end)
		s.Jitter = jitter(s.Windows, max(opt.MinWindowSamples, 1))
	}
	if opt.Memory != nil {
		m := opt.Memory.withRatio()
		s.Memory = &m
	}
	return s
}

// windows returns the windows of [start, end): every one, empty ones
// included, with its rates.
func (a *Accumulator) windows(start, end time.Time) []Window {
	n := int((end.Sub(start) + a.opt.Window - 1) / a.opt.Window)
	ws := make([]Window, n)
	sec := a.opt.Window.Seconds()
	for i := range ws {
		ws[i].StartS = (time.Duration(i) * a.opt.Window).Seconds()
		d := newDists(a.opt.RelativeError)
		if i < len(a.ws) {
			ws[i] = a.ws[i]
			d = a.wd[i]
		}
		ws[i].SLOAttainment = ratio(float64(ws[i].MetSLO), float64(ws[i].Requests))
		ws[i].ThroughputTokS = float64(ws[i].Tokens) / sec
		ws[i].GoodputTokS = float64(ws[i].GoodTokens) / sec
		ws[i].Latency = d.latency()
	}
	return ws
}

type classAcc struct {
	st ClassStats
	d  dists
}

func jitter(ws []Window, minSamples int) *Jitter {
	var ttft, tpot []float64
	for _, w := range ws {
		if w.TTFTMs.Count >= uint64(minSamples) && w.TTFTMs.P99 != nil {
			ttft = append(ttft, *w.TTFTMs.P99)
		}
		if w.TPOTMs.Count >= uint64(minSamples) && w.TPOTMs.P99 != nil {
			tpot = append(tpot, *w.TPOTMs.P99)
		}
	}
	return &Jitter{TTFTP99: spreadOf(ttft), TPOTP99: spreadOf(tpot)}
}

// spreadOf computes exact statistics of a small set of values.
func spreadOf(v []float64) Spread {
	s := Spread{Windows: len(v)}
	if len(v) == 0 {
		return s
	}
	slices.Sort(v)
	var sum float64
	for _, x := range v {
		sum += x
	}
	mean := sum / float64(len(v))
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	rank := func(q float64) float64 { return v[max(int(math.Ceil(q*float64(len(v))))-1, 0)] }
	s.Mean, s.Stddev = ptr(mean), ptr(math.Sqrt(ss/float64(len(v))))
	s.Min, s.Max = ptr(v[0]), ptr(v[len(v)-1])
	s.P99OverP50 = ratio(rank(0.99), rank(0.5))
	return s
}

// SetMemory sets the memory gauges the summary carries (known only at the
// end of a run).
func (a *Accumulator) SetMemory(m *Memory) { a.opt.Memory = m }
