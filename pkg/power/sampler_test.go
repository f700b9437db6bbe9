package power

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/power/powertest"
)

func TestCounterWrapAndReload(t *testing.T) {
	const maxR = 1000
	cases := []struct {
		name      string
		raws      []uint64
		wantTotal uint64
		wantGaps  int
	}{
		{"monotonic", []uint64{10, 20, 50}, 40, 0},
		{"wrap", []uint64{900, 990, 30}, 90 + 40, 0},
		{"reload", []uint64{300, 350, 5, 25}, 50 + 20, 1},
		{"equal", []uint64{5, 5, 5}, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctr := counter{maxRange: maxR}
			gaps := 0
			for _, r := range c.raws {
				if ctr.add(r) {
					gaps++
				}
			}
			if ctr.total != c.wantTotal || gaps != c.wantGaps {
				t.Fatalf("total %d gaps %d, want %d %d", ctr.total, gaps, c.wantTotal, c.wantGaps)
			}
		})
	}
	noMax := counter{}
	noMax.add(100)
	if !noMax.add(50) || noMax.total != 0 {
		t.Fatal("a backwards step without a known range must be a gap")
	}
}

// FuzzCounter checks that no sequence of raw counter values makes the
// total go down or jump by more than half the range in one step.
func FuzzCounter(f *testing.F) {
	f.Add(uint64(1000), []byte{1, 200, 3, 250, 0})
	f.Fuzz(func(t *testing.T, maxRange uint64, raws []byte) {
		c := counter{maxRange: maxRange}
		prev := uint64(0)
		for i, b := range raws {
			raw := uint64(b) * (maxRange/256 + 1)
			if i%3 == 2 {
				raw = uint64(b)
			}
			c.add(raw)
			if c.total < prev || maxRange > 0 && c.total-prev > max(maxRange/2, raw) {
				t.Fatalf("total %d after %d (raw %d, range %d)", c.total, prev, raw, maxRange)
			}
			prev = c.total
		}
	})
}

// funcSource is a fake power source whose value is a function of the
// (fake, in a synctest bubble) clock.
type funcSource struct {
	info  Info
	watts func(time.Time) float64
	fail  atomic.Bool
}

func (f *funcSource) Info() Info { return f.info }
func (f *funcSource) Read(context.Context) (Reading, error) {
	if f.fail.Load() {
		return Reading{}, ErrUnavailable
	}
	return Reading{PowerW: f.watts(time.Now())}, nil
}
func (f *funcSource) Close() error { return nil }

func TestSamplerTrapezoidAndBaseline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		// 5 W idle for 1 s, 5 W + ramp to 15 W during the 2 s run, 6 W idle after.
		watts := func(now time.Time) float64 {
			switch d := now.Sub(start); {
			case d <= time.Second:
				return 5
			case d <= 3*time.Second:
				return 5 + 5*(d-time.Second).Seconds()
			default:
				return 6
			}
		}
		src := &funcSource{info: Info{Name: "fake", Scope: ScopeBoardInput, Method: Trapezoid}, watts: watts}
		s := NewSampler(&Probed{Sources: []Source{src}}, SamplerOptions{})
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second)
		s.Stop()
		ticks, over := s.Ticks()
		if ticks != 81 || over != 0 {
			t.Fatalf("ticks %d overruns %d: absolute deadlines at 20 Hz give 81 ticks in 4 s", ticks, over)
		}
		sec := func(a, b float64) Span {
			return Span{start.Add(time.Duration(a * float64(time.Second))), start.Add(time.Duration(b * float64(time.Second)))}
		}
		r := s.Report(sec(1, 3), sec(0, 1), sec(3.05, 4))
		// Run: ∫ 5 + 5(t−1) over [1,3] = 10 + 10 = 20 J, exact for a linear ramp.
		if r.EnergyJ == nil || math.Abs(*r.EnergyJ-20) > 1e-9 || r.MeasuredS != 2 {
			t.Fatalf("energy %v measured %g", r.EnergyJ, r.MeasuredS)
		}
		if *r.IdleWBefore != 5 || math.Abs(*r.IdleWAfter-6) > 1e-12 || math.Abs(*r.DriftW-1) > 1e-12 {
			t.Fatalf("idle before %v after %v drift %v", *r.IdleWBefore, *r.IdleWAfter, *r.DriftW)
		}
		if math.Abs(*r.NetEnergyJ-(20-5.5*2)) > 1e-9 {
			t.Fatalf("net %v", *r.NetEnergyJ)
		}
		if r.Scope != ScopeBoardInput || r.Method != Trapezoid || r.Samples != 41 || r.ResolutionMs != 50 {
			t.Fatalf("report %+v", r)
		}
		short := s.Report(sec(1, 1.02), Span{}, Span{})
		if short.EnergyJ != nil || !strings.Contains(strings.Join(short.Notes, "\n"), "shorter than the sensor resolution") {
			t.Fatalf("short window: energy %v notes %q", short.EnergyJ, short.Notes)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal("second Close:", err)
		}
		if err := s.Start(t.Context()); err == nil {
			t.Fatal("Start after Close succeeded")
		}
	})
}

func TestSamplerCounterGapsAndVanishingFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const e = "sys/class/powercap/intel-rapl:0/energy_uj"
		m := powertest.NewFS(map[string]string{
			"sys/class/powercap/intel-rapl:0/name": "package-0",
			e:                                      "262143000000",
			"sys/class/powercap/intel-rapl:0/max_energy_range_uj":     "262143328850",
			"sys/class/thermal/thermal_zone0/type":                    "cpu-thermal",
			"sys/class/thermal/thermal_zone0/temp":                    "50000",
			"sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq": "1800000",
			"sys/devices/system/cpu/cpufreq/policy0/cpuinfo_max_freq": "1800000",
			"sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq": "1800000",
		})
		p := Probe(t.Context(), m, ProbeOptions{})
		if len(p.Sources) != 1 || len(p.Thermal) != 1 || len(p.Freq) != 1 {
			t.Fatalf("probe: %d sources %d zones %d freq; %+v", len(p.Sources), len(p.Thermal), len(p.Freq), p.Unavailable)
		}
		s := NewSampler(p, SamplerOptions{})
		start := time.Now()
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		// 10 W = 500 000 µJ per 50 ms tick, wrapping at max_energy_range_uj.
		raw := uint64(262143000000)
		step := func(n int) {
			for range n {
				time.Sleep(50 * time.Millisecond)
				raw = (raw + 500000) % 262143328850
				m.Set(e, strconv.FormatUint(raw, 10))
			}
		}
		time.Sleep(time.Millisecond) // off the tick boundaries
		step(20)                     // 1 s, with a wrap after ~33 ms
		m.Remove(e)                  // the device goes away for 0.5 s
		m.Set("sys/class/thermal/thermal_zone0/temp", "71000")
		m.Set("sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq", "1200000") // thermal cap
		time.Sleep(500 * time.Millisecond)
		raw = 1000 // driver reloaded: counter restarts near zero
		m.Set(e, "1000")
		step(20)
		s.Stop()
		r := s.Report(Span{start, time.Now()}, Span{}, Span{})
		if r.EnergyJ == nil {
			t.Fatalf("no energy: %q", r.Notes)
		}
		// Each tick reads the value set 49 ms before it, so the first
		// interval of each segment is flat: 2 × 19 intervals of 0.5 J plus
		// 2 flat ones = 19 J over 39 × 50 ms; the 0.55 s gap is excluded.
		if math.Abs(*r.EnergyJ-19) > 1e-9 || math.Abs(r.MeasuredS-1.95) > 1e-9 {
			t.Fatalf("energy %g J over %g s (want 19 J over 1.95 s); notes %q", *r.EnergyJ, r.MeasuredS, r.Notes)
		}
		notes := strings.Join(r.Notes, "\n")
		if !strings.Contains(notes, "1 gap(s)") || !strings.Contains(notes, "does not exist") {
			t.Fatalf("notes lack the gap: %q", r.Notes)
		}
		if r.ThrottleEvents != 1 || *r.Thermal[0].MaxC != 71 || *r.Thermal[0].MinC != 50 || *r.Freq[0].MaxMHz != 1800 {
			t.Fatalf("thermal %+v freq %+v throttle %d", r.Thermal, r.Freq, r.ThrottleEvents)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatal(err)
		}
		pt := s.PowerTrace(Span{start, time.Now()})
		if len(pt) != 39 || math.Abs(pt[len(pt)-1].V-10) > 1e-9 {
			t.Fatalf("power trace: %d points, last %+v", len(pt), pt[len(pt)-1])
		}
		if tt := s.TempTrace(Span{start, time.Now()}); len(tt) != 51 || tt[len(tt)-1].V != 71 {
			t.Fatalf("temp trace: %d points", len(tt))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSamplerNoSensorReport(t *testing.T) {
	p := Probe(t.Context(), powertest.NewFS(map[string]string{}), ProbeOptions{})
	s := NewSampler(p, SamplerOptions{})
	defer s.Close()
	r := s.Report(Span{time.Now(), time.Now().Add(time.Second)}, Span{}, Span{})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"energy_j":null`, `"avg_w":null`, `"unavailable_reasons":[{"source":"rapl"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
	if strings.Contains(string(b), "NaN") {
		t.Fatal("NaN in JSON")
	}
}
