package loadgen

import (
	"cmp"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/edgeinfer/edgeinfer/platforms"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/plugin"
)

// Versions is the report's version matrix: everything that must match
// for two reports to be comparable.
type Versions struct {
	SDK          string `json:"sdk"`
	Commit       string `json:"commit"`
	CommitSource string `json:"commit_source"`
	Modified     bool   `json:"modified"`
	Go           string `json:"go"`
	OS           string `json:"os"`
	Arch         string `json:"arch"`
	CPU          string `json:"cpu_model"`
	Cores        int    `json:"cores"`
	Board        string `json:"board"`
	// Platform is the board profile and its choices (providers, threads,
	// affinity, KV budget) against the run's engine configuration.
	Platform *Platform `json:"platform"`
	// SIMD lists the vector extensions the CPU reports that ONNX Runtime's
	// kernels choose between (AVX2 or AVX-512 changes the int4 matmul
	// speed several-fold, so two hosts sold under one CPU name are not
	// comparable without it).
	SIMD []string `json:"cpu_simd"`
	// HugePages is the kernel's transparent huge page mode ("always",
	// "madvise", "never") or why it is unknown: KV pools and model weights
	// are put in huge pages only where it is not "never".
	HugePages string `json:"transparent_huge_pages"`
	// PluginRuntime runs bundles' pre/post plugins: wazero's version and
	// whether its compiler or its interpreter runs here.
	PluginRuntime string         `json:"plugin_runtime"`
	Models        []ModelVersion `json:"models"`
	// Threads are the ONNX Runtime session's intra- and inter-op threads
	// (0 = ONNX Runtime's default); null when the engine config is unknown.
	IntraOpThreads *int `json:"intra_op_threads"`
	InterOpThreads *int `json:"inter_op_threads"`
	// KVBudgetBytes and PrefixCache are the engine's cache settings.
	KVBudgetBytes *int64                 `json:"kv_budget_bytes"`
	PrefixCache   *bool                  `json:"prefix_cache"`
	Sched         engine.SchedulerConfig `json:"sched"`
	// Target is the remote server's own account of itself (bench
	// --target), with what cannot be known from outside marked unknown.
	Target *TargetInfo `json:"target,omitempty"`
}

// ModelVersion is a model's row of the matrix: the engine's ModelInfo
// (name, version, digest, quantisation, contract, geometry, KV, provider,
// ONNX Runtime version) with the provider attempts in a JSON form that
// reads back (an error as its message, durations in ms).
type ModelVersion struct {
	engine.ModelInfo
	Attempts []ProviderAttempt `json:"provider_attempts,omitempty"`
}

// ProviderAttempt is one execution provider the engine tried, in order.
type ProviderAttempt struct {
	Provider   string  `json:"provider"`
	Chosen     bool    `json:"chosen"`
	Reason     string  `json:"reason,omitempty"`
	Error      string  `json:"error,omitempty"`
	DurationMs float64 `json:"duration_ms"`
}

func modelVersion(m engine.ModelInfo) ModelVersion {
	mv := ModelVersion{ModelInfo: m}
	mv.ModelInfo.Attempts = nil
	for _, a := range m.Attempts {
		pa := ProviderAttempt{Provider: string(a.Provider), Chosen: a.Chosen, Reason: a.Reason, DurationMs: float64(a.Duration) / 1e6}
		if a.Err != nil {
			pa.Error = a.Err.Error()
		}
		mv.Attempts = append(mv.Attempts, pa)
	}
	return mv
}

// collectVersions fills the matrix from the build, the machine and the
// engine.
func collectVersions(res *Result) Versions {
	facts := platforms.ReadFacts("/")
	model, simd := cpuOf(facts)
	v := Versions{SDK: "(unknown)", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		Cores: runtime.NumCPU(), CPU: model, SIMD: simd, HugePages: hugePageMode(), Sched: res.Sched, Target: res.Target,
		PluginRuntime: plugin.Runtime()}
	v.Board, v.Platform = detectPlatform(facts, res.EngineConfig)
	for _, m := range res.Models {
		v.Models = append(v.Models, modelVersion(m))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.SDK = bi.Main.Version
		if bi.Main.Path != "github.com/edgeinfer/edgeinfer" {
			for _, d := range bi.Deps {
				if d.Path == "github.com/edgeinfer/edgeinfer" {
					v.SDK = d.Version
				}
			}
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit, v.CommitSource = s.Value, "vcs.revision"
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Commit == "" {
		// go run and go test builds carry no VCS stamp: ask git.
		if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
			v.Commit, v.CommitSource = strings.TrimSpace(string(out)), "git rev-parse"
			if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
				v.Modified = len(strings.TrimSpace(string(st))) > 0
			}
		} else {
			v.Commit, v.CommitSource = "unknown", "no vcs stamp and no git: "+err.Error()
		}
	}
	if c := res.EngineConfig; c != nil {
		intra, inter := c.Session.IntraOpThreads, c.Session.InterOpThreads
		budget := c.KV.BudgetBytes
		if budget == 0 {
			budget = 256 << 20
		}
		prefix := !c.KV.DisablePrefixCache
		v.IntraOpThreads, v.InterOpThreads, v.KVBudgetBytes, v.PrefixCache = &intra, &inter, &budget, &prefix
	}
	return v
}

// cpuOf is the version matrix's processor, as the board detection reads
// it (platforms): an ARM CPU's cores named by their CPU part ("4×Cortex-A55,
// 4×Cortex-A76"; arm64 kernels write no model name, and a Raspberry Pi's
// "Model" line names the board, which the matrix's board row has), else
// the model name; and the vector extensions of its first processor that
// ONNX Runtime's and our kernels care about.
func cpuOf(f platforms.Facts) (model string, simd []string) {
	model = cmp.Or(f.CPU.CoreNames(), f.CPU.Model, "unknown: /proc/cpuinfo names no model and no CPU part")
	return model, f.CPU.SIMD()
}

// hugePageMode reads the bracketed choice of
// /sys/kernel/mm/transparent_hugepage/enabled.
func hugePageMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "unknown: " + err.Error()
	}
	s := string(b)
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return "unknown: " + strings.TrimSpace(s)
}
