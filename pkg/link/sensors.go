package link

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/power"
)

// PowerSensor reads the primary power source pkg/power found (the widest
// scope) once per snapshot: the average watts since the previous read for
// an energy counter, the instantaneous watts otherwise. With no source it
// reports null and the probe's reasons. The returned function is safe for
// concurrent use.
func PowerSensor(p *power.Probed) func() Sensor {
	src, ok := p.Primary()
	if !ok {
		reasons := make([]string, 0, len(p.Unavailable))
		for _, u := range p.Unavailable {
			if !strings.HasPrefix(u.Source, "thermal") {
				reasons = append(reasons, u.Source+": "+u.Reason)
			}
		}
		why := "no power sensor found"
		if len(reasons) > 0 {
			why += " (" + strings.Join(reasons, "; ") + ")"
		}
		return func() Sensor { return Sensor{Unit: "W", Reason: why} }
	}
	info := src.Info()
	var mu sync.Mutex
	var lastUJ uint64
	var lastAt time.Time
	return func() Sensor {
		mu.Lock()
		defer mu.Unlock()
		s := Sensor{Unit: "W", Scope: string(info.Scope), Source: info.Name}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := src.Read(ctx)
		if err != nil {
			s.Reason = "read failed: " + err.Error()
			return s
		}
		now := time.Now()
		if info.Method == power.Trapezoid {
			v := r.PowerW
			s.Value = &v
			return s
		}
		switch {
		case r.Gap || lastAt.IsZero() || r.EnergyUJ < lastUJ:
			s.Reason = "first reading of the energy counter (or a gap): average needs two"
		default:
			v := float64(r.EnergyUJ-lastUJ) / 1e6 / now.Sub(lastAt).Seconds()
			s.Value = &v
		}
		lastUJ, lastAt = r.EnergyUJ, now
		return s
	}
}

// TemperatureSensor reports the hottest thermal zone pkg/power found, or
// null with the reason when there is none.
func TemperatureSensor(p *power.Probed) func() Sensor {
	if len(p.Thermal) == 0 {
		why := "no readable thermal zone"
		for _, u := range p.Unavailable {
			if strings.HasPrefix(u.Source, "thermal") {
				why = u.Source + ": " + u.Reason
			}
		}
		return func() Sensor { return Sensor{Unit: "C", Reason: why} }
	}
	zones := p.Thermal
	return func() Sensor {
		s := Sensor{Unit: "C"}
		for _, z := range zones {
			b, err := os.ReadFile(z.Path)
			if err != nil {
				continue
			}
			mc, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				continue
			}
			if v := float64(mc) / 1000; s.Value == nil || v > *s.Value {
				s.Value, s.Source = &v, z.Name
			}
		}
		if s.Value == nil {
			s.Reason = "thermal zones did not read"
		}
		return s
	}
}
