package power

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// sixFiles writes a sensor tree whose probe opens exactly six files: two
// RAPL counters, two thermal zones, two cpufreq policies.
func sixFiles(t testing.TB) string {
	dir := t.TempDir()
	files := map[string]string{
		"sys/class/powercap/intel-rapl:0/name":                    "package-0",
		"sys/class/powercap/intel-rapl:0/energy_uj":               "1000",
		"sys/class/powercap/intel-rapl:0/max_energy_range_uj":     "262143328850",
		"sys/class/powercap/intel-rapl:1/name":                    "psys",
		"sys/class/powercap/intel-rapl:1/energy_uj":               "2000",
		"sys/class/thermal/thermal_zone0/type":                    "x86_pkg_temp",
		"sys/class/thermal/thermal_zone0/temp":                    "45000",
		"sys/class/thermal/thermal_zone1/type":                    "acpitz",
		"sys/class/thermal/thermal_zone1/temp":                    "40000",
		"sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq": "2800000",
		"sys/devices/system/cpu/cpufreq/policy1/scaling_cur_freq": "2700000",
	}
	for name, v := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSamplerCPUCost runs the sampler at 20 Hz on six open files for 3 s
// of real time and reports the process's CPU time as a share of one core,
// beside the same process idling for 3 s (the Go runtime's own
// background work), so the sampler's share is the difference.
func TestSamplerCPUCost(t *testing.T) {
	if testing.Short() {
		t.Skip("9 s of real time")
	}
	p := Probe(context.Background(), os.DirFS(sixFiles(t)), ProbeOptions{})
	if len(p.Sources) != 2 || len(p.Thermal) != 2 || len(p.Freq) != 2 {
		t.Fatalf("expected 6 files, got %d sources %d zones %d freq", len(p.Sources), len(p.Thermal), len(p.Freq))
	}
	s := NewSampler(p, SamplerOptions{Period: 50 * time.Millisecond})
	defer s.Close()
	share := func(f func()) float64 {
		c0, w0 := cpuTime(), time.Now()
		f()
		return 100 * (cpuTime() - c0).Seconds() / time.Since(w0).Seconds()
	}
	idle := share(func() { time.Sleep(3 * time.Second) }) // on purpose: a 3 s window of doing nothing, measured
	// The same absolute-deadline loop doing nothing: the Go runtime's cost
	// of waking a goroutine 20 times a second.
	bare := share(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		(&Sampler{}).loop(ctx, 50*time.Millisecond, func() {})
	})
	busy := share(func() {
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // on purpose: the sampler runs for the measured 3 s window
		s.Stop()
	})
	ticks, over := s.Ticks()
	t.Logf("sampler at 20 Hz, 6 files open: %d ticks (%d overruns); process CPU %.3f %% of one core sampling, %.3f %% for an empty 20 Hz loop, %.3f %% idle",
		ticks, over, busy, bare, idle)
	if ticks < 55 {
		t.Fatalf("only %d ticks in 3 s at 20 Hz", ticks)
	}
}

// BenchmarkTick measures one local tick: two counter reads and the
// thermal/frequency monitor (six pread calls on open files).
func BenchmarkTick(b *testing.B) {
	p := Probe(context.Background(), os.DirFS(sixFiles(b)), ProbeOptions{})
	s := NewSampler(p, SamplerOptions{})
	defer s.Close()
	ctx := context.Background()
	for b.Loop() {
		for _, sr := range s.mu.series {
			s.readSource(ctx, sr)
		}
		s.readSys()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*20/1e9*100, "%core@20Hz")
}

func TestRAPLWrapOnDisk(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/intel-rapl")); err != nil {
		t.Fatal(err)
	}
	p := Probe(context.Background(), os.DirFS(dir), ProbeOptions{})
	defer p.Close()
	var pkg Source
	for _, s := range p.Sources {
		if s.Info().Name == "rapl package-0" {
			pkg = s
		}
	}
	if pkg == nil {
		t.Fatal("no package source")
	}
	read := func() Reading {
		r, err := pkg.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	e := filepath.Join(dir, "sys/class/powercap/intel-rapl:0/energy_uj")
	r0 := read() // 262143000000, 328850 µJ below the wrap
	if err := os.WriteFile(e, []byte("171150\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r1 := read() // the same open file, read again at offset 0
	if d := r1.EnergyUJ - r0.EnergyUJ; d != 500000 || r1.Gap {
		t.Fatalf("delta across the wrap %d gap %v, want 500000", d, r1.Gap)
	}
}
