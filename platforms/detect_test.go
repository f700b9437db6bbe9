package platforms

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/power"
)

// Every fixture under testdata/ is a tree of a real board's files (shapes
// from the boards' kernels; see testdata/README.md).
func TestDetectFixtures(t *testing.T) {
	tests := []struct {
		fixture   string
		board     string
		generic   bool
		providers string
		threads   int
		cpus      []int
		affinity  string
		power     []string // power sources present (name prefixes)
		scope     power.Scope
		warnings  []string // substrings, each must appear in plan or sensor warnings
	}{
		{fixture: "jetson-orin-nano", board: "jetson-orin", providers: "TensorRT → CUDA → CPU", threads: 6,
			power: []string{"jetson-ina3221 VDD_IN"}, scope: power.ScopeBoardInput},
		{fixture: "jetson-agx-orin", board: "jetson-orin", providers: "TensorRT → CUDA → CPU", threads: 12,
			power: []string{"jetson-ina3221 module (partial"}, scope: power.ScopeModule},
		{fixture: "jetson-xavier-nx-jp5", board: "jetson", providers: "TensorRT → CUDA → CPU", threads: 6,
			warnings: []string{"JetPack 5", "Debian 11 sysroot", `"jetson-ina3221" expected`}},
		{fixture: "lying-jetson-no-rails", board: "jetson-orin", providers: "TensorRT → CUDA → CPU", threads: 4,
			warnings: []string{"compatible has no nvidia,tegra", `power sensor "jetson-ina3221" expected on jetson-orin but absent`, "ina3221 driver is bound"}},
		{fixture: "rpi5", board: "rpi5", providers: "XNNPACK → CPU", threads: 4},
		{fixture: "rpi4", board: "rpi4", providers: "XNNPACK → CPU", threads: 4},
		{fixture: "rk3588", board: "rk3588", providers: "CPU", threads: 4, cpus: []int{4, 5, 6, 7}, affinity: "6;7;8"},
		{fixture: "rk3588s-bad-capacity", board: "rk3588", providers: "CPU", threads: 4, cpus: []int{4, 5, 6, 7}, affinity: "6;7;8",
			warnings: []string{"cpu4/cpu_capacity", "not an integer in 1..1024"}},
		{fixture: "lying-rk3588-no-parts", board: "rk3588", providers: "CPU", threads: 4,
			warnings: []string{"cpu_capacity", "threads not pinned"}},
		{fixture: "qualcomm-qcs6490", board: "qualcomm", providers: "QNN → CPU", threads: 4, cpus: []int{4, 5, 6, 7}, affinity: "6;7;8"},
		{fixture: "intel-core-ultra", board: "intel-core-ultra", providers: "OpenVINO(NPU) → OpenVINO(GPU) → OpenVINO(CPU) → CPU",
			threads: 6, cpus: []int{0, 2, 4, 6, 8, 10}, affinity: "3;5;7;9;11", power: []string{"rapl psys"}, scope: power.ScopeModule},
		{fixture: "x86-nvidia", board: "x86-nvidia", providers: "TensorRT → CUDA → CPU", threads: 16,
			warnings: []string{`power sensor "nvml" expected`}},
		{fixture: "generic-amd64", board: "generic-amd64", generic: true, threads: 1,
			providers: "TensorRT → CUDA → OpenVINO → QNN → CoreML → XNNPACK → DirectML → CPU"},
		{fixture: "generic-arm64", board: "generic-arm64", generic: true, threads: 4,
			providers: "TensorRT → CUDA → OpenVINO → QNN → CoreML → XNNPACK → DirectML → CPU"},
		{fixture: "unknown-rk3399", board: "generic-arm64", generic: true, threads: 2, cpus: []int{4, 5}, affinity: "6",
			providers: "TensorRT → CUDA → OpenVINO → QNN → CoreML → XNNPACK → DirectML → CPU"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			p, err := Detect(DetectOptions{Root: "testdata/" + tt.fixture})
			if err != nil {
				t.Fatal(err)
			}
			if p.Board != tt.board || p.Generic != tt.generic {
				t.Errorf("board %s generic %v, want %s %v (recognised by %v)", p.Board, p.Generic, tt.board, tt.generic, p.RecognisedBy)
			}
			if len(p.RecognisedBy) == 0 {
				t.Error("no evidence")
			}
			if got := ProviderNames(p.Providers); got != tt.providers {
				t.Errorf("providers %s, want %s", got, tt.providers)
			}
			if p.Threads.IntraOp != tt.threads || !slices.Equal(p.Threads.CPUs, tt.cpus) || p.Threads.Affinity != tt.affinity {
				t.Errorf("threads %d on %v affinity %q (%s), want %d on %v %q", p.Threads.IntraOp, p.Threads.CPUs, p.Threads.Affinity, p.Threads.Why, tt.threads, tt.cpus, tt.affinity)
			}
			if p.KV.Bytes < kvFloor || p.KV.Bytes > kvCap || p.KV.Bytes%kvAlign != 0 {
				t.Errorf("kv budget %d (%s)", p.KV.Bytes, p.KV.Why)
			}
			if len(p.Sensors) == 0 {
				t.Error("no sensors listed")
			}
			sr := CheckSensors(context.Background(), p)
			for _, want := range tt.power {
				if !slices.ContainsFunc(sr.Power, func(s PowerSensor) bool { return strings.HasPrefix(s.Name, want) }) {
					t.Errorf("power sensor %q not found in %+v (absent: %+v)", want, sr.Power, sr.Absent)
				}
			}
			if tt.scope != "" {
				i := slices.IndexFunc(sr.Power, func(s PowerSensor) bool { return s.Name == sr.Primary })
				if i < 0 || sr.Power[i].Scope != tt.scope {
					t.Errorf("primary %q, want scope %s", sr.Primary, tt.scope)
				}
			}
			all := strings.Join(slices.Concat(p.Warnings, sr.Warnings), "\n")
			for _, w := range tt.warnings {
				if !strings.Contains(all, w) {
					t.Errorf("warnings lack %q:\n%s", w, all)
				}
			}
			if len(tt.warnings) == 0 && all != "" {
				t.Errorf("unexpected warnings:\n%s", all)
			}
		})
	}
}

func TestDetectEmptyRootIsGeneric(t *testing.T) {
	p, err := Detect(DetectOptions{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Generic || !strings.HasPrefix(p.Board, "generic") {
		t.Fatalf("board %s generic %v", p.Board, p.Generic)
	}
	if !strings.Contains(p.RecognisedBy[0], "no board profile matches nothing identifying") {
		t.Errorf("reason %q", p.RecognisedBy[0])
	}
	if p.Threads.IntraOp != 0 || p.KV.Bytes != 0 {
		t.Errorf("with nothing readable the defaults should stand: %+v %+v", p.Threads, p.KV)
	}
	if !slices.ContainsFunc(p.Warnings, func(w string) bool { return strings.Contains(w, "/proc/cpuinfo unreadable") }) {
		t.Errorf("warnings %v", p.Warnings)
	}
}

func TestDetectForcedBoard(t *testing.T) {
	p, err := Detect(DetectOptions{Root: "testdata/generic-arm64", Board: "rk3588"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Board != "rk3588" || !strings.Contains(p.RecognisedBy[0], "forced") {
		t.Errorf("%s %v", p.Board, p.RecognisedBy)
	}
	if _, err := Detect(DetectOptions{Board: "pdp-11"}); err == nil || !strings.Contains(err.Error(), "known: jetson-orin") {
		t.Errorf("unknown board: %v", err)
	}
}

func TestTensorRTCache(t *testing.T) {
	p, err := Detect(DetectOptions{Root: "testdata/jetson-orin-nano", CacheDir: "/var/cache/edgeinfer"})
	if err != nil {
		t.Fatal(err)
	}
	o := p.Providers[0].Options
	if o["trt_engine_cache_enable"] != "1" || o["trt_engine_cache_path"] != "/var/cache/edgeinfer/tensorrt" || o["trt_fp16_enable"] != "1" {
		t.Errorf("options %v", o)
	}
}
