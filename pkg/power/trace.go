package power

import "time"

// TracePoint is one point of a time series for charts.
type TracePoint struct {
	T time.Time `json:"t"`
	V float64   `json:"v"`
}

// PowerTrace returns the primary source's power in W over span: each
// sample's value for power sources, ΔE/Δt between consecutive samples for
// counters. Points after a gap are left out, so a chart shows the hole.
func (s *Sampler) PowerTrace(span Span) []TracePoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	src, ok := s.probed.Primary()
	if !ok {
		return nil
	}
	var out []TracePoint
	for _, sr := range s.mu.series {
		if sr.src != src {
			continue
		}
		for i, p := range sr.points {
			if !span.contains(p.at) {
				continue
			}
			switch {
			case sr.info.Method == Trapezoid:
				out = append(out, TracePoint{p.at, p.powerW})
			case i > 0 && !p.gap:
				prev := sr.points[i-1]
				if dt := p.at.Sub(prev.at).Seconds(); dt > 0 {
					out = append(out, TracePoint{p.at, float64(p.energyUJ-prev.energyUJ) / 1e6 / dt})
				}
			}
		}
	}
	return out
}

// TempTrace returns the hottest thermal zone's temperature in °C at each
// monitor tick within span.
func (s *Sampler) TempTrace(span Span) []TracePoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []TracePoint
	for _, sp := range s.mu.sys {
		if !span.contains(sp.at) {
			continue
		}
		hot, any := 0.0, false
		for i, ok := range sp.tempOK {
			if ok && (!any || sp.tempC[i] > hot) {
				hot, any = sp.tempC[i], true
			}
		}
		if any {
			out = append(out, TracePoint{sp.at, hot})
		}
	}
	return out
}
