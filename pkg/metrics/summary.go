package metrics

import (
	"cmp"
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
// SLO attainment denominator, whatever its outcome.
func Summarize(tls []*Timeline, opt SummaryOptions) Summary {
	start, end := opt.Start, opt.End
	for _, t := range tls {
		if opt.Start.IsZero() && !t.Arrived.IsZero() && (start.IsZero() || t.Arrived.Before(start)) {
			start = t.Arrived
		}
		if opt.End.IsZero() {
			last := t.Finished
			if n := len(t.Tokens); n > 0 && t.Arrived.Add(t.Tokens[n-1]).After(last) {
				last = t.Arrived.Add(t.Tokens[n-1])
			}
			if last.After(end) {
				end = last
			}
		}
	}
	wall := 0.0
	if !start.IsZero() && end.After(start) {
		wall = end.Sub(start).Seconds()
	}
	s := Summary{Start: start, End: end, WallS: wall, Requests: len(tls), Outcomes: map[Outcome]int{}}
	all := newDists(opt.RelativeError)
	classes := map[string]*classAcc{}
	for _, t := range tls {
		met := t.MetSLO()
		s.Outcomes[t.Outcome]++
		s.PromptTokens += int64(t.PromptTokens)
		s.OutputTokens += int64(t.OutputTokens)
		s.Preemptions += t.Preempted
		if met {
			s.MetSLO++
			s.GoodTokens += int64(t.OutputTokens)
		}
		all.add(t)
		c := classes[t.Class]
		if c == nil {
			c = &classAcc{d: newDists(opt.RelativeError), st: ClassStats{Class: t.Class, Outcomes: map[Outcome]int{}}}
			classes[t.Class] = c
		}
		c.st.Requests++
		c.st.Outcomes[t.Outcome]++
		if met {
			c.st.MetSLO++
			c.st.GoodTokens += int64(t.OutputTokens)
		}
		c.d.add(t)
	}
	s.Latency = all.latency()
	s.SLOAttainment = ratio(float64(s.MetSLO), float64(s.Requests))
	s.GoodputTokS = ratio(float64(s.GoodTokens), wall)
	s.ThroughputTokS = ratio(float64(s.OutputTokens), wall)
	s.CompletedPerS = ratio(float64(s.Outcomes[Completed]), wall)
	for _, c := range classes {
		st := c.st
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
		s.Windows = windows(tls, start, end, opt)
		s.Jitter = jitter(s.Windows, max(opt.MinWindowSamples, 1))
	}
	if opt.Memory != nil {
		m := opt.Memory.withRatio()
		s.Memory = &m
	}
	return s
}

type classAcc struct {
	st ClassStats
	d  dists
}

// windows splits [start, end) into fixed windows of opt.Window.
func windows(tls []*Timeline, start, end time.Time, opt SummaryOptions) []Window {
	n := int((end.Sub(start) + opt.Window - 1) / opt.Window)
	ws := make([]Window, n)
	ds := make([]dists, n)
	for i := range ws {
		ws[i].StartS = (time.Duration(i) * opt.Window).Seconds()
		ds[i] = newDists(opt.RelativeError)
	}
	index := func(at time.Time) (int, bool) {
		if at.Before(start) || !at.Before(end) {
			return 0, false
		}
		return int(at.Sub(start) / opt.Window), true
	}
	for _, t := range tls {
		met := t.MetSLO()
		if i, ok := index(t.Arrived); ok {
			ws[i].Requests++
			if met {
				ws[i].MetSLO++
			}
			ds[i].add(t)
		}
		for _, off := range t.Tokens {
			if i, ok := index(t.Arrived.Add(off)); ok {
				ws[i].Tokens++
				if met {
					ws[i].GoodTokens++
				}
			}
		}
	}
	sec := opt.Window.Seconds()
	for i := range ws {
		ws[i].SLOAttainment = ratio(float64(ws[i].MetSLO), float64(ws[i].Requests))
		ws[i].ThroughputTokS = float64(ws[i].Tokens) / sec
		ws[i].GoodputTokS = float64(ws[i].GoodTokens) / sec
		ws[i].Latency = ds[i].latency()
	}
	return ws
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
