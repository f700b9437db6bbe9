package power

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
)

type wantSource struct {
	name    string
	scope   Scope
	partial bool
	method  Method
	watts   float64 // expected first reading for Trapezoid sources
}

func TestProbeFixtures(t *testing.T) {
	cases := []struct {
		fixture     string
		sources     []wantSource
		primary     string
		unavailable map[string]string // source → substring of its reason
		thermal     int
		freq        int
		throttle    int
	}{
		{
			fixture: "intel-rapl",
			sources: []wantSource{
				{name: "rapl psys", scope: ScopeModule, method: CounterDelta},
				{name: "rapl package-0", scope: ScopeCPUPackage, method: CounterDelta},
			},
			primary:     "rapl psys",
			unavailable: map[string]string{"hwmon": "no hwmon device", "battery": "no battery", "nvml": "not built with nvml", "jetson-ina3221": "not present"},
			thermal:     2, freq: 2, throttle: 2,
		},
		{
			fixture: "amd-rapl",
			sources: []wantSource{
				{name: "rapl package-0", scope: ScopeCPUPackage, method: CounterDelta},
				{name: "hwmon amd_energy Esocket0", scope: ScopeCPUPackage, method: CounterDelta},
			},
			primary:     "rapl package-0",
			unavailable: map[string]string{"thermal": "no readable thermal zone", "cpufreq": "no cpufreq policy"},
		},
		{
			fixture: "hwmon",
			sources: []wantSource{
				{name: "hwmon amdgpu power1", scope: ScopeGPU, method: Trapezoid, watts: 15},
				{name: "hwmon ina219 curr1", scope: ScopeRail, method: Trapezoid, watts: 5.1 * 0.8},
			},
			primary:     "hwmon amdgpu power1",
			unavailable: map[string]string{"rapl": "not present"},
		},
		{
			fixture: "jetson-orin-nano",
			sources: []wantSource{
				{name: "jetson-ina3221 VDD_CPU_GPU_CV", scope: ScopeRail, method: Trapezoid, watts: 5.064 * 0.312},
				{name: "jetson-ina3221 VDD_IN", scope: ScopeBoardInput, method: Trapezoid, watts: 5.072 * 1.184},
				{name: "jetson-ina3221 VDD_SOC", scope: ScopeRail, method: Trapezoid, watts: 5.072 * 0.464},
			},
			primary:     "jetson-ina3221 VDD_IN",
			unavailable: map[string]string{"hwmon": "ina3221 (read as jetson-ina3221)"},
			thermal:     5, freq: 2,
		},
		{
			fixture: "jetson-agx-orin",
			sources: []wantSource{
				{name: "jetson-ina3221 VDDQ_VDD2_1V8AO", scope: ScopeRail, method: Trapezoid, watts: 1},
				{name: "jetson-ina3221 VDD_CPU_CV", scope: ScopeRail, method: Trapezoid, watts: 19.2 * 0.1},
				{name: "jetson-ina3221 VDD_GPU_SOC", scope: ScopeRail, method: Trapezoid, watts: 19.2 * 0.4},
				{name: "jetson-ina3221 VIN_SYS_5V0", scope: ScopeRail, method: Trapezoid, watts: 3},
				{name: "jetson-ina3221 module (partial: rails VDDQ_VDD2_1V8AO, VDD_CPU_CV, VDD_GPU_SOC, VIN_SYS_5V0)",
					scope: ScopeModule, partial: true, method: Trapezoid, watts: 1 + 1.92 + 7.68 + 3},
			},
			primary: "jetson-ina3221 module (partial: rails VDDQ_VDD2_1V8AO, VDD_CPU_CV, VDD_GPU_SOC, VIN_SYS_5V0)",
			thermal: 1,
		},
		{
			fixture: "jetpack4",
			sources: []wantSource{
				{name: "jetson-ina3221x POM_5V_IN", scope: ScopeBoardInput, method: Trapezoid, watts: 2.512},
				{name: "jetson-ina3221x POM_5V_GPU", scope: ScopeRail, method: Trapezoid, watts: 0.040},
				{name: "jetson-ina3221x POM_5V_CPU", scope: ScopeRail, method: Trapezoid, watts: 0.365},
			},
			primary: "jetson-ina3221x POM_5V_IN",
			thermal: 1,
		},
		{
			fixture: "battery-discharging",
			sources: []wantSource{{name: "battery BAT0", scope: ScopeBoardInput, method: Trapezoid, watts: 8.53}},
			primary: "battery BAT0",
		},
		{
			fixture:     "battery-charging",
			unavailable: map[string]string{"battery BAT0": "status Charging: power_now is system power only while Discharging"},
		},
		{
			fixture:     "rk3588",
			unavailable: map[string]string{"rapl": "not present", "hwmon": "no power, energy or voltage×current channel in hwmon devices: soc_thermal", "battery": "no battery", "smart-plug": "no smart plug configured"},
			thermal:     7, freq: 5,
		},
		{
			fixture:     "rpi5",
			unavailable: map[string]string{"hwmon": "hwmon devices: cpu_thermal, rpi_volt", "devfreq": "no devfreq device", "battery": "not present"},
			thermal:     1, freq: 1,
		},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			p := Probe(context.Background(), os.DirFS(path.Join("testdata", c.fixture)), ProbeOptions{})
			defer func() {
				if err := p.Close(); err != nil {
					t.Error(err)
				}
			}()
			var got []string
			for _, s := range p.Sources {
				got = append(got, s.Info().Name)
			}
			if len(got) != len(c.sources) {
				t.Fatalf("sources %q, want %d", got, len(c.sources))
			}
			for _, w := range c.sources {
				i := slices.Index(got, w.name)
				if i < 0 {
					t.Fatalf("no source %q in %q", w.name, got)
				}
				info := p.Sources[i].Info()
				if info.Scope != w.scope || info.Partial != w.partial || info.Method != w.method || len(info.Paths) == 0 {
					t.Errorf("%s: info %+v", w.name, info)
				}
				r, err := p.Sources[i].Read(context.Background())
				if err != nil {
					t.Fatalf("%s: read: %v", w.name, err)
				}
				if w.method == Trapezoid && math.Abs(r.PowerW-w.watts) > 1e-9 {
					t.Errorf("%s: %g W, want %g", w.name, r.PowerW, w.watts)
				}
			}
			if pr, ok := p.Primary(); ok != (c.primary != "") || ok && pr.Info().Name != c.primary {
				t.Errorf("primary %v, want %q", pr, c.primary)
			}
			for src, reason := range c.unavailable {
				i := slices.IndexFunc(p.Unavailable, func(u Unavailable) bool { return u.Source == src })
				if i < 0 || !strings.Contains(p.Unavailable[i].Reason, reason) {
					t.Errorf("unavailable %s: want %q in %+v", src, reason, p.Unavailable)
				}
			}
			if len(p.Thermal) != c.thermal || len(p.Freq) != c.freq || len(p.throttle) != c.throttle {
				t.Errorf("thermal %d freq %d throttle %d", len(p.Thermal), len(p.Freq), len(p.throttle))
			}
		})
	}
}

// deniedFS refuses to open files whose base name is in deny, as sysfs does
// for energy_uj to non-root users since Linux 5.10.
type deniedFS struct {
	fs.FS
	deny string
}

func (d deniedFS) Open(name string) (fs.File, error) {
	if path.Base(name) == d.deny {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	return d.FS.Open(name)
}

func TestRAPLRootOnly(t *testing.T) {
	p := Probe(context.Background(), deniedFS{os.DirFS("testdata/intel-rapl"), "energy_uj"}, ProbeOptions{})
	defer p.Close()
	if len(p.Sources) != 0 {
		t.Fatalf("sources without readable counters: %d", len(p.Sources))
	}
	n := 0
	for _, u := range p.Unavailable {
		if strings.HasPrefix(u.Source, "rapl ") && strings.Contains(u.Reason, "root-only since Linux 5.10") {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("want 2 root-only reasons, got %+v", p.Unavailable)
	}
}

// TestProbeThisMachine probes the real /. It does not assert that sensors
// are absent (CI machines differ), only that whatever is not found comes
// with a reason, and that with no source the report's energy is null.
func TestProbeThisMachine(t *testing.T) {
	p := Probe(context.Background(), os.DirFS("/"), ProbeOptions{})
	s := NewSampler(p, SamplerOptions{})
	defer s.Close()
	for _, u := range p.Unavailable {
		if u.Source == "" || u.Reason == "" {
			t.Errorf("unavailable entry without source or reason: %+v", u)
		}
	}
	if len(p.Sources) == 0 {
		if len(p.Unavailable) == 0 {
			t.Fatal("no source and no reason")
		}
		r := s.Report(Span{}, Span{}, Span{})
		if r.EnergyJ != nil || len(r.UnavailableReasons) == 0 {
			t.Fatalf("no sensor but energy %v reasons %v", r.EnergyJ, r.UnavailableReasons)
		}
	}
	for _, u := range p.Unavailable {
		t.Logf("unavailable: %s %s: %s", u.Source, u.Path, u.Reason)
	}
	for _, src := range p.Sources {
		t.Logf("source: %+v", src.Info())
	}
	if errors.Is(s.Start(context.Background()), ErrStarted) {
		t.Fatal("first Start reported ErrStarted")
	}
}
