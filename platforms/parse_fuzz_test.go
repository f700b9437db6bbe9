package platforms

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

// seedFiles adds every fixture's copy of name to the corpus.
func seedFiles(f *testing.F, name string) {
	matches, _ := filepath.Glob(filepath.Join("testdata", "*", name))
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil {
			f.Add(b)
		}
	}
}

func FuzzParseCPUInfo(f *testing.F) {
	seedFiles(f, "proc/cpuinfo")
	f.Add([]byte("processor: -1\nprocessor : 99999999999\ncore id: x\nCPU part: \x00\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ci := parseCPUInfo(b)
		if ci.Cores < 0 || ci.Processors < 0 || (ci.Parts != nil && len(ci.Parts) != ci.Processors) {
			t.Fatalf("inconsistent %+v", ci)
		}
		// the plan built from it, and the version matrix's processor
		// (its cores by CPU part, its vector extensions), must not panic
		// either
		_ = threadPlan(&Facts{CPU: ci})
		_, _ = ci.CoreNames(), ci.SIMD()
	})
}

func FuzzParseMeminfo(f *testing.F) {
	seedFiles(f, "proc/meminfo")
	f.Add([]byte("MemTotal: 99999999999999999999 kB\nMemAvailable: -5 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMeminfo(b)
		if err == nil && m.TotalBytes <= 0 {
			t.Fatalf("no error with total %d", m.TotalBytes)
		}
		if m.TotalBytes < 0 || m.AvailableBytes < 0 {
			t.Fatalf("negative %+v", m)
		}
		kv := kvPlan(m)
		if kv.Bytes < 0 || kv.Bytes > kvCap {
			t.Fatalf("budget %d from %+v", kv.Bytes, m)
		}
	})
}

func FuzzParseSmallFiles(f *testing.F) {
	seedFiles(f, "sys/devices/system/cpu/cpu0/cpu_capacity")
	seedFiles(f, "sys/devices/system/cpu/cpu4/cpu_capacity")
	seedFiles(f, "etc/nv_tegra_release")
	seedFiles(f, "proc/device-tree/compatible")
	seedFiles(f, "sys/devices/cpu_core/cpus")
	f.Add([]byte("0-4095,4096"))
	f.Add([]byte("# R999999 (release), REVISION: ....., "))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := parseCapacity(b); err == nil && (c < 1 || c > 1024) {
			t.Fatalf("capacity %d accepted", c)
		}
		if l, err := parseCPUList(b); err == nil && len(l) > 4097 {
			t.Fatalf("cpu list of %d", len(l))
		}
		_ = jetPackFor(parseTegraRelease(b))
		for _, s := range parseDTStrings(b) {
			if s == "" || !printable(s) {
				t.Fatalf("entry %q", s)
			}
		}
	})
}

// FuzzReadFacts runs the whole detection over a tree whose files are the
// fuzzer's bytes: no input may crash it or make it plan nonsense.
func FuzzReadFacts(f *testing.F) {
	f.Add([]byte("NVIDIA Jetson Orin\x00"), []byte("nvidia,tegra234\x00"), []byte("processor: 0\nCPU part: 0xd0b\n"), []byte("banana"), []byte("MemTotal: 10 kB"))
	f.Add([]byte(""), []byte("rockchip,rk3588\x00"), []byte("processor: 0\nprocessor: 1\n"), []byte("2000"), []byte(""))
	f.Fuzz(func(t *testing.T, model, compat, cpuinfo, capacity, meminfo []byte) {
		fsys := fstest.MapFS{
			"proc/device-tree/model":                   {Data: model},
			"proc/device-tree/compatible":              {Data: compat},
			"proc/cpuinfo":                             {Data: cpuinfo},
			"proc/meminfo":                             {Data: meminfo},
			"sys/devices/system/cpu/cpu0/cpu_capacity": {Data: capacity},
			"sys/devices/system/cpu/cpu1/cpu_capacity": {Data: []byte("1024")},
		}
		facts := readFacts(fsys, "fuzz")
		p := PlanFor(facts, DetectOptions{})
		if p.Board == "" || len(p.RecognisedBy) == 0 || len(p.Providers) == 0 {
			t.Fatalf("plan %+v", p)
		}
		if p.Threads.IntraOp < 0 || (p.Threads.Affinity != "" && len(p.Threads.CPUs) != p.Threads.IntraOp) {
			t.Fatalf("threads %+v", p.Threads)
		}
	})
}
