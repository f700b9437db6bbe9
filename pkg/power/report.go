package power

import (
	"fmt"
	"math"
	"time"
)

// Span is a closed time interval; the zero Span means "not measured".
type Span struct {
	Start, End time.Time
}

// Duration returns End − Start.
func (s Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// IsZero reports whether the span is unset.
func (s Span) IsZero() bool { return s.Start.IsZero() && s.End.IsZero() }

func (s Span) contains(t time.Time) bool { return !t.Before(s.Start) && !t.After(s.End) }

// Report is the JSON form of a run's power evidence. Every number is a
// pointer: null means "not measured", with the reason in
// UnavailableReasons or Notes. Nothing is estimated silently.
type Report struct {
	// EnergyJ is the primary source's gross energy over the run's
	// measured part (MeasuredS, between its first and last sample).
	EnergyJ *float64 `json:"energy_j"`
	// NetEnergyJ subtracts the idle baseline (mean of before and after,
	// or whichever was measured) times MeasuredS.
	NetEnergyJ  *float64 `json:"net_energy_j"`
	AvgW        *float64 `json:"avg_w"`
	IdleWBefore *float64 `json:"idle_w_before"`
	IdleWAfter  *float64 `json:"idle_w_after"`
	// DriftW is IdleWAfter − IdleWBefore: a large drift (heat soak, a
	// background job) makes the net figure doubtful.
	DriftW    *float64 `json:"drift_w"`
	Source    string   `json:"source,omitempty"`
	Scope     Scope    `json:"scope,omitempty"`
	Partial   bool     `json:"partial"`
	Method    Method   `json:"method,omitempty"`
	RunS      float64  `json:"run_s"`
	MeasuredS float64  `json:"measured_s"`
	// ResolutionMs is the effective resolution of the primary source:
	// the sensor's own where known, else the sampling period.
	ResolutionMs       float64        `json:"resolution_ms"`
	Samples            int            `json:"samples"`
	Sources            []SourceReport `json:"sources"`
	UnavailableReasons []Unavailable  `json:"unavailable_reasons"`
	Thermal            []ZoneStats    `json:"thermal"`
	Freq               []FreqStats    `json:"freq"`
	ThrottleEvents     int64          `json:"throttle_events"`
	Notes              []string       `json:"notes"`
}

// SourceReport is one source's figures over the run.
type SourceReport struct {
	Info
	EnergyJ      *float64 `json:"energy_j"`
	AvgW         *float64 `json:"avg_w"`
	MeasuredS    float64  `json:"measured_s"`
	Samples      int      `json:"samples"`
	Gaps         int      `json:"gaps"`
	ResolutionMs float64  `json:"resolution_ms"`
}

// ZoneStats are a thermal zone's extremes over the run, in °C.
type ZoneStats struct {
	Zone    string   `json:"zone"`
	MinC    *float64 `json:"min_c"`
	MaxC    *float64 `json:"max_c"`
	Samples int      `json:"samples"`
}

// FreqStats are a frequency domain's figures over the run, in MHz.
type FreqStats struct {
	Domain   string   `json:"domain"`
	MinMHz   *float64 `json:"min_mhz"`
	MaxMHz   *float64 `json:"max_mhz"`
	MeanMHz  *float64 `json:"mean_mhz"`
	HWMaxMHz *float64 `json:"hw_max_mhz"`
	Samples  int      `json:"samples"`
}

// integral is a source's energy over a span.
type integral struct {
	uj       float64
	measured time.Duration
	samples  int
	gaps     int
}

// integrate sums energy between consecutive points inside span, skipping
// pairs across a gap: counter deltas, or trapezoids of power.
func integrate(pts []point, m Method, span Span) integral {
	var in integral
	var prev *point
	for i := range pts {
		p := &pts[i]
		if !span.contains(p.at) {
			continue
		}
		in.samples++
		if prev != nil {
			if p.gap {
				in.gaps++
			} else {
				dt := p.at.Sub(prev.at)
				if m == CounterDelta {
					in.uj += float64(p.energyUJ - prev.energyUJ)
				} else {
					in.uj += (p.powerW + prev.powerW) / 2 * dt.Seconds() * 1e6
				}
				in.measured += dt
			}
		}
		prev = p
	}
	return in
}

// resolution is the finest window a source can resolve here.
func (s *Sampler) resolution(info Info) time.Duration {
	return max(info.Resolution, s.opt.Period)
}

// energyLocked returns a source's energy (J) and mean power over span, or
// nils with a note saying why there is no value.
func (s *Sampler) energyLocked(sr *series, span Span, what string) (e, w *float64, in integral, note string) {
	in = integrate(sr.points, sr.info.Method, span)
	res := s.resolution(sr.info)
	switch {
	case span.Duration() < res:
		return nil, nil, in, fmt.Sprintf("%s: %s window %v is shorter than the sensor resolution %v: no value", sr.info.Name, what, span.Duration(), res)
	case in.measured <= 0:
		return nil, nil, in, fmt.Sprintf("%s: %s window has fewer than two consecutive samples: no value", sr.info.Name, what)
	}
	j := in.uj / 1e6
	return &j, ptr(j / in.measured.Seconds()), in, ""
}

// Report digests the samples of the run span and of the optional idle
// spans before and after it (zero Spans are skipped).
func (s *Sampler) Report(run, idleBefore, idleAfter Span) Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Report{
		RunS:               run.Duration().Seconds(),
		UnavailableReasons: append([]Unavailable{}, s.probed.Unavailable...),
		Sources:            []SourceReport{},
		Thermal:            []ZoneStats{},
		Freq:               []FreqStats{},
		Notes:              []string{},
	}
	var primary *series
	if src, ok := s.probed.Primary(); ok {
		for _, sr := range s.mu.series {
			if sr.src == src {
				primary = sr
			}
		}
	}
	for _, sr := range s.mu.series {
		e, w, in, note := s.energyLocked(sr, run, "run")
		r.Sources = append(r.Sources, SourceReport{Info: sr.info, EnergyJ: e, AvgW: w, MeasuredS: in.measured.Seconds(),
			Samples: in.samples, Gaps: in.gaps, ResolutionMs: ms(s.resolution(sr.info))})
		if note != "" {
			r.Notes = append(r.Notes, note)
		}
		if in.gaps > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %d gap(s) in the run: energy covers %.3f s of %.3f s", sr.info.Name, in.gaps, in.measured.Seconds(), r.RunS))
		}
	}
	if primary == nil {
		r.Notes = append(r.Notes, "no power sensor: energy is null (see unavailable_reasons)")
	} else {
		info := primary.info
		r.Source, r.Scope, r.Partial, r.Method = info.Name, info.Scope, info.Partial, info.Method
		r.ResolutionMs = ms(s.resolution(info))
		var in integral
		r.EnergyJ, r.AvgW, in, _ = s.energyLocked(primary, run, "run")
		r.MeasuredS, r.Samples = in.measured.Seconds(), in.samples
		var note string
		if !idleBefore.IsZero() {
			if _, r.IdleWBefore, _, note = s.energyLocked(primary, idleBefore, "idle-before"); note != "" {
				r.Notes = append(r.Notes, note)
			}
		}
		if !idleAfter.IsZero() {
			if _, r.IdleWAfter, _, note = s.energyLocked(primary, idleAfter, "idle-after"); note != "" {
				r.Notes = append(r.Notes, note)
			}
		}
		base := r.IdleWBefore
		switch {
		case r.IdleWBefore != nil && r.IdleWAfter != nil:
			base = ptr((*r.IdleWBefore + *r.IdleWAfter) / 2)
			r.DriftW = ptr(*r.IdleWAfter - *r.IdleWBefore)
		case r.IdleWAfter != nil:
			base = r.IdleWAfter
		}
		if base != nil && r.EnergyJ != nil {
			r.NetEnergyJ = ptr(*r.EnergyJ - *base*r.MeasuredS)
		}
	}
	s.sysStatsLocked(run, &r)
	for _, n := range s.mu.noteOrder {
		if c := s.mu.notes[n]; c > 1 {
			n = fmt.Sprintf("%s (×%d)", n, c)
		}
		r.Notes = append(r.Notes, n)
	}
	return r
}

// sysStatsLocked fills thermal, frequency and throttle figures for span.
func (s *Sampler) sysStatsLocked(span Span, r *Report) {
	p := s.probed
	zs := make([]ZoneStats, len(p.Thermal))
	for i, z := range p.Thermal {
		zs[i].Zone = z.Name
	}
	fs := make([]FreqStats, len(p.Freq))
	sums := make([]float64, len(p.Freq))
	for i, d := range p.Freq {
		fs[i].Domain = d.Name
		if d.HWMax > 0 {
			fs[i].HWMaxMHz = ptr(d.HWMax)
		}
	}
	var first, last *sysPoint
	wasCapped := make([]bool, len(p.Freq))
	for k := range s.mu.sys {
		sp := &s.mu.sys[k]
		if !span.contains(sp.at) {
			continue
		}
		if first == nil {
			first = sp
			copy(wasCapped, sp.capped)
		}
		last = sp
		for i := range zs {
			if sp.tempOK[i] {
				zs[i].Samples++
				zs[i].MinC = minPtr(zs[i].MinC, sp.tempC[i])
				zs[i].MaxC = maxPtr(zs[i].MaxC, sp.tempC[i])
			}
		}
		for i := range fs {
			if sp.freqOK[i] {
				fs[i].Samples++
				sums[i] += sp.freqMHz[i]
				fs[i].MinMHz = minPtr(fs[i].MinMHz, sp.freqMHz[i])
				fs[i].MaxMHz = maxPtr(fs[i].MaxMHz, sp.freqMHz[i])
			}
			if sp.capped[i] && !wasCapped[i] {
				r.ThrottleEvents++ // the frequency cap came down during the run
			}
			wasCapped[i] = sp.capped[i]
		}
	}
	for i := range fs {
		if fs[i].Samples > 0 {
			fs[i].MeanMHz = ptr(sums[i] / float64(fs[i].Samples))
		}
	}
	if first != nil {
		r.ThrottleEvents += max(last.throttle-first.throttle, 0)
	}
	r.Thermal, r.Freq = zs, fs
}

func minPtr(p *float64, v float64) *float64 {
	if p == nil || v < *p {
		return ptr(v)
	}
	return p
}

func maxPtr(p *float64, v float64) *float64 {
	if p == nil || v > *p {
		return ptr(v)
	}
	return p
}

func ptr(v float64) *float64 { return &v }

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }
