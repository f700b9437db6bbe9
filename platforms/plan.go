package platforms

import (
	"cmp"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// Plan is what a profile chose for one board, and why. It is plain data.
type Plan struct {
	// Board is the profile's ID ("jetson-orin", "rpi5", "generic-arm64").
	Board string `json:"board"`
	// Name is the board as it names itself (the device-tree model, the DMI
	// product) or the profile's name for it.
	Name string `json:"name"`
	// Generic is true when no specific profile matched.
	Generic bool `json:"generic"`
	// RecognisedBy is the evidence, each item naming the file it came from.
	RecognisedBy []string `json:"recognised_by"`
	// Providers is the execution-provider order, first preferred; the
	// session appends CPU when it is missing.
	Providers []ort.ProviderConfig `json:"providers"`
	// Threads is the intra-op thread plan.
	Threads ThreadPlan `json:"threads"`
	// KV is the KV cache budget per decoder.
	KV KVPlan `json:"kv"`
	// Sensors are the sensors this board should have.
	Sensors []SensorWant `json:"sensors"`
	// Notes explain choices and what the SDK cannot use on this board
	// (an NPU without an ONNX Runtime provider) and what to use instead.
	Notes []string `json:"notes,omitempty"`
	// Warnings are facts that contradict each other or were unreadable,
	// with the safe choice that was made instead.
	Warnings []string `json:"warnings,omitempty"`
	// Facts are the files read.
	Facts Facts `json:"facts"`
}

// ThreadPlan is how many intra-op threads to run and on which CPUs.
type ThreadPlan struct {
	// IntraOp is the thread count; 0 leaves ONNX Runtime's default (one
	// per physical core).
	IntraOp int `json:"intra_op"`
	// CPUs are the processors the threads are meant for (0-based); nil
	// when any will do.
	CPUs []int `json:"cpus,omitempty"`
	// Affinity is ONNX Runtime's session.intra_op_thread_affinities value
	// pinning the pool's IntraOp-1 threads (the calling thread is not
	// ONNX Runtime's to pin); "" when the threads are not pinned.
	Affinity string `json:"affinity,omitempty"`
	// Why says how the plan was made.
	Why string `json:"why"`
}

// KVPlan is the KV cache budget and how it was derived.
type KVPlan struct {
	// Bytes is the budget; 0 leaves the engine's default.
	Bytes int64  `json:"bytes"`
	Why   string `json:"why"`
}

// SensorWant is a sensor a profile expects.
type SensorWant struct {
	// Source is the pkg/power source name prefix ("jetson-ina3221",
	// "rapl", "nvml") or a thermal/devfreq name ("thermal", "devfreq").
	Source string `json:"source"`
	// Kind is "power", "thermal" or "frequency".
	Kind string `json:"kind"`
	// Why says what the sensor measures on this board and how to read it
	// (which rail sum is the module).
	Why string `json:"why"`
	// Expected is true when the board always has it: its absence is a
	// warning, not just a fact.
	Expected bool `json:"expected"`
}

// DetectOptions configures Detect. The zero value detects on "/".
type DetectOptions struct {
	// Root is the directory whose proc/, sys/ and etc/ are read; "" is "/".
	Root string `json:"root,omitempty"`
	// Board forces a profile by ID instead of detecting one (the facts are
	// still read, for threads, memory and sensors).
	Board string `json:"board,omitempty"`
	// CacheDir, when set, is where providers that compile the model (the
	// TensorRT engine cache) keep their build; "" leaves it off.
	CacheDir string `json:"cache_dir,omitempty"`
}

// Validate checks that a forced board names a profile.
func (o DetectOptions) Validate() error {
	if o.Board != "" && profileByID(o.Board) == nil {
		return fmt.Errorf("%w: %q (known: %s)", ErrUnknownProfile, o.Board, strings.Join(ProfileIDs(), ", "))
	}
	return nil
}

// Detect reads the facts under opts.Root and returns the plan of the first
// profile that matches, or the generic one of the CPU's architecture. It
// fails only on invalid options.
func Detect(opts DetectOptions) (Plan, error) {
	if err := opts.Validate(); err != nil {
		return Plan{}, err
	}
	return PlanFor(ReadFacts(opts.Root), opts), nil
}

// PlanFor chooses a plan from facts already read.
func PlanFor(f Facts, opts DetectOptions) Plan {
	p := Plan{Facts: f, Warnings: slices.Clone(f.Warnings)}
	var prof *profile
	if opts.Board != "" {
		prof = profileByID(opts.Board)
		if prof != nil {
			p.RecognisedBy = []string{"forced by configuration (board " + opts.Board + ")"}
		}
	}
	if prof == nil {
		for i := range profiles {
			if ev := profiles[i].match(&f); len(ev) > 0 {
				prof, p.RecognisedBy = &profiles[i], ev
				break
			}
		}
	}
	if prof == nil {
		prof = genericProfile(&f)
		p.Generic = true
		p.RecognisedBy = []string{genericReason(&f)}
	}
	p.Board = prof.id
	p.Name = cmp.Or(f.Model, dmiName(f.DMI), prof.name)
	p.Threads = threadPlan(&f)
	p.KV = kvPlan(f.Mem)
	p.Providers = nil
	prof.build(&f, &p, opts)
	return p
}

func dmiName(d DMI) string {
	switch {
	case d.ProductName == "" || strings.EqualFold(d.ProductName, "To Be Filled By O.E.M."):
		return ""
	case d.SysVendor != "" && !strings.HasPrefix(d.ProductName, d.SysVendor):
		return d.SysVendor + " " + d.ProductName
	}
	return d.ProductName
}

// arch is the CPU architecture the facts say, else this build's.
func (f *Facts) arch() string {
	if f.CPU.Arch != "" {
		return f.CPU.Arch
	}
	return runtime.GOARCH
}

func genericReason(f *Facts) string {
	var seen []string
	if f.Model != "" {
		seen = append(seen, fmt.Sprintf("device-tree model %q", f.Model))
	}
	if len(f.Compatible) > 0 {
		seen = append(seen, fmt.Sprintf("compatible %q", f.Compatible[0]))
	}
	if n := dmiName(f.DMI); n != "" {
		seen = append(seen, fmt.Sprintf("DMI %q", n))
	}
	if f.CPU.Model != "" {
		seen = append(seen, fmt.Sprintf("CPU %q", f.CPU.Model))
	}
	what := "nothing identifying (no device tree, DMI or CPU model)"
	if len(seen) > 0 {
		what = strings.Join(seen, ", ")
	}
	return fmt.Sprintf("no board profile matches %s: generic %s profile (CPU architecture from %s)", what, f.arch(), archSource(f))
}

func archSource(f *Facts) string {
	if f.CPU.Arch != "" {
		return "/proc/cpuinfo"
	}
	return "the build, GOARCH " + runtime.GOARCH
}

// providers is a shorthand for a provider chain without options.
func providers(names ...ort.Provider) []ort.ProviderConfig {
	out := make([]ort.ProviderConfig, len(names))
	for i, n := range names {
		out[i] = ort.ProviderConfig{Name: n}
	}
	return out
}

// tensorRT is the TensorRT entry: fp16 (every Orin and every NVIDIA GPU
// since Pascal runs it at twice the fp32 rate) and, with a cache dir, the
// engine cache (a TensorRT build takes minutes on a Jetson; the cache
// makes the second start take seconds).
func tensorRT(opts DetectOptions) ort.ProviderConfig {
	o := map[string]string{"trt_fp16_enable": "1"}
	if opts.CacheDir != "" {
		o["trt_engine_cache_enable"] = "1"
		o["trt_engine_cache_path"] = filepath.Join(opts.CacheDir, "tensorrt")
	}
	return ort.ProviderConfig{Name: ort.TensorRT, Options: o}
}

// ProviderNames renders a chain as "TensorRT → CUDA → CPU", options in
// brackets.
func ProviderNames(chain []ort.ProviderConfig) string {
	if len(chain) == 0 {
		return "(ONNX Runtime's default chain)"
	}
	parts := make([]string, len(chain))
	for i, c := range chain {
		parts[i] = string(c.Name)
		if d := c.Options["device_type"]; d != "" {
			parts[i] += "(" + d + ")"
		}
	}
	return strings.Join(parts, " → ")
}

// affinity renders ONNX Runtime's intra-op affinity string for threads on
// cpus: one entry per pool thread (IntraOp-1 of them), 1-based processor
// ids, ";" between threads. The calling thread keeps cpus[0] free to run on.
func affinity(cpus []int) string {
	if len(cpus) < 2 {
		return ""
	}
	parts := make([]string, 0, len(cpus)-1)
	for _, c := range cpus[1:] {
		parts = append(parts, strconv.Itoa(c+1))
	}
	return strings.Join(parts, ";")
}

// littleParts are ARM efficiency cores: on a SoC mixing them with larger
// cores, intra-op threads belong on the larger ones (an operator's work is
// split evenly, so one little core holds up the whole pool).
var littleParts = map[string]bool{"0xd03": true, "0xd05": true, "0xd46": true}

// threadPlan chooses threads from the facts: the biggest cores by
// cpu_capacity, else by CPU part, else Intel's performance cores, else one
// per physical core.
func threadPlan(f *Facts) ThreadPlan {
	if big, ok := biggest(f.Capacity); ok {
		return ThreadPlan{IntraOp: len(big), CPUs: big, Affinity: affinity(big),
			Why: fmt.Sprintf("cores differ in cpu_capacity (%s): %d threads pinned to the cores of at least half the largest capacity, CPUs %s",
				capacitySummary(f.Capacity), len(big), cpuList(big))}
	}
	if big := bigByPart(f.CPU.Parts); big != nil {
		return ThreadPlan{IntraOp: len(big), CPUs: big, Affinity: affinity(big),
			Why: fmt.Sprintf("CPU parts mix efficiency and performance cores (%s): %d threads pinned to the performance cores, CPUs %s",
				partSummary(f.CPU.Parts), len(big), cpuList(big))}
	}
	if p := physicalPCores(f); len(p) > 0 {
		return ThreadPlan{IntraOp: len(p), CPUs: p, Affinity: affinity(p),
			Why: fmt.Sprintf("Intel hybrid CPU: %d threads pinned to one logical CPU of each performance core (/sys/devices/cpu_core/cpus), CPUs %s", len(p), cpuList(p))}
	}
	if f.CPU.Cores > 0 {
		why := fmt.Sprintf("%d cores of one kind: one thread per physical core, unpinned", f.CPU.Cores)
		if f.CPU.Processors > f.CPU.Cores {
			why = fmt.Sprintf("%d physical cores (%d logical): one thread per physical core, unpinned (SMT siblings share the vector units)", f.CPU.Cores, f.CPU.Processors)
		}
		return ThreadPlan{IntraOp: f.CPU.Cores, Why: why}
	}
	return ThreadPlan{Why: "no CPU list readable: ONNX Runtime's default (one per physical core)"}
}

// biggest returns the CPUs of at least half the largest capacity when
// capacities differ: on RK3588 the A55s (414 of 1024) are left out, on a
// three-cluster Snapdragon the middle cores (~880) stay in with the prime
// core, since one prime core alone would be a one-thread pool.
func biggest(caps []int) ([]int, bool) {
	if len(caps) == 0 {
		return nil, false
	}
	hi, lo := slices.Max(caps), slices.Min(caps)
	if hi == lo || lo*2 > hi {
		return nil, false
	}
	var out []int
	for i, c := range caps {
		if c*2 >= hi {
			out = append(out, i)
		}
	}
	return out, true
}

func bigByPart(parts []string) []int {
	var big []int
	little := 0
	for i, p := range parts {
		if littleParts[p] {
			little++
		} else {
			big = append(big, i)
		}
	}
	if little == 0 || len(big) == 0 {
		return nil
	}
	return big
}

func physicalPCores(f *Facts) []int {
	if len(f.PCores) == 0 {
		return nil
	}
	var out []int
	for _, c := range f.PCores {
		if first, ok := f.CPU.FirstSibling[c]; ok && first != c {
			continue // an SMT sibling of a core already counted
		}
		out = append(out, c)
	}
	if len(out) >= f.CPU.Cores {
		return nil // every core is a P core: not hybrid
	}
	return out
}

func capacitySummary(caps []int) string {
	counts := map[int]int{}
	for _, c := range caps {
		counts[c]++
	}
	keys := make([]int, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d×%d", counts[k], k)
	}
	return strings.Join(parts, ", ")
}

func partSummary(parts []string) string {
	counts := map[string]int{}
	var order []string
	for _, p := range parts {
		if counts[p] == 0 {
			order = append(order, p)
		}
		counts[p]++
	}
	out := make([]string, len(order))
	for i, p := range order {
		out[i] = fmt.Sprintf("%d×%s", counts[p], cmp.Or(armParts[p], p))
	}
	return strings.Join(out, ", ")
}

func cpuList(cpus []int) string {
	if len(cpus) == 0 {
		return ""
	}
	var parts []string
	start, prev := cpus[0], cpus[0]
	flush := func() {
		if start == prev {
			parts = append(parts, strconv.Itoa(start))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", start, prev))
		}
	}
	for _, c := range cpus[1:] {
		if c == prev+1 {
			prev = c
			continue
		}
		flush()
		start, prev = c, c
	}
	flush()
	return strings.Join(parts, ",")
}

// The KV budget is a quarter of the memory available, between 64 MiB and
// 2 GiB. A quarter leaves the rest for the weights, ONNX Runtime's arenas
// and the application (on Jetson and the Pi the GPU shares that memory);
// the cap keeps one engine from claiming a server's memory for a cache
// its batch cannot fill. KVBudgetBytes in the engine config overrides it.
const (
	kvFloor = 64 << 20
	kvCap   = 2 << 30
	kvAlign = 16 << 20
)

func kvPlan(m Meminfo) KVPlan {
	avail, from := m.AvailableBytes, "MemAvailable"
	if avail <= 0 {
		avail, from = m.TotalBytes/2, "half of MemTotal (no MemAvailable)"
	}
	if avail <= 0 {
		return KVPlan{Why: "no /proc/meminfo: the engine's default (256 MiB)"}
	}
	b := min(max(avail/4, kvFloor), kvCap)
	b -= b % kvAlign
	why := fmt.Sprintf("a quarter of %s %s, within %s..%s", from, mib(avail), mib(kvFloor), mib(kvCap))
	if avail/4 < kvFloor {
		why += fmt.Sprintf("; only %s available: the floor may not fit beside the model", mib(avail))
	}
	return KVPlan{Bytes: b, Why: why}
}

func mib(b int64) string {
	if b >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", b>>20)
}
