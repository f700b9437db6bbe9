//go:build cgo

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/platforms"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"golang.org/x/sys/unix"
)

// doctor: what this device is, what the SDK will use on it and why, and
// what to do about everything it will not. Board detection and sensors read
// --root (a fixture tree instead of "/"); the ONNX Runtime library and its
// providers are always this machine's.

func init() {
	register(&command{name: "doctor", summary: "check this device: board profile, CPU, memory, ONNX Runtime library, providers, sensors, store", run: runDoctor})
}

type doctorReport struct {
	Root   string       `json:"root"`
	Board  doctorBoard  `json:"board"`
	CPU    doctorCPU    `json:"cpu"`
	Memory doctorMemory `json:"memory"`
	// Plan is the profile's choice of providers, threads and KV budget.
	Plan    doctorPlan    `json:"plan"`
	Library doctorLibrary `json:"onnxruntime"`
	Binary  *doctorBinary `json:"binary,omitempty"`
	// Providers are the plan's providers tried on this machine's library.
	Providers []platforms.ProviderCheck `json:"providers"`
	// ProvidersNote says why Providers is empty or whose they are.
	ProvidersNote string                 `json:"providers_note,omitempty"`
	Sensors       platforms.SensorReport `json:"sensors"`
	Store         *doctorStore           `json:"store,omitempty"`
	Notes         []string               `json:"notes,omitempty"`
	Problems      []doctorProblem        `json:"problems"`
}

type doctorBoard struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Generic      bool     `json:"generic"`
	RecognisedBy []string `json:"recognised_by"`
}

type doctorCPU struct {
	Arch       string   `json:"arch"`
	Model      string   `json:"model,omitempty"`
	Cores      string   `json:"core_types,omitempty"`
	Processors int      `json:"processors"`
	Physical   int      `json:"physical_cores"`
	Capacity   []int    `json:"cpu_capacity,omitempty"`
	SIMD       []string `json:"simd"`
}

type doctorMemory struct {
	TotalBytes     int64 `json:"total_bytes"`
	AvailableBytes int64 `json:"available_bytes"`
}

type doctorPlan struct {
	Providers      []ort.ProviderConfig   `json:"providers"`
	ProviderOrder  string                 `json:"provider_order"`
	Threads        platforms.ThreadPlan   `json:"threads"`
	KVBudgetBytes  int64                  `json:"kv_budget_bytes"`
	KVWhy          string                 `json:"kv_why"`
	ExpectedSensor []platforms.SensorWant `json:"expected_sensors"`
}

type doctorLibrary struct {
	Found   bool   `json:"found"`
	Path    string `json:"path,omitempty"`
	Error   string `json:"error,omitempty"`
	Version string `json:"version,omitempty"`
	// Machine and GOARCH are the ELF's architecture.
	Machine string   `json:"machine,omitempty"`
	GOARCH  string   `json:"goarch,omitempty"`
	Needed  []string `json:"needed,omitempty"`
	// GlibcNeeded is the highest GLIBC_ version the library needs, against
	// the system's (this machine's; with --root also the tree's, if it has
	// a libc).
	GlibcNeeded string `json:"glibc_needed,omitempty"`
	// GlibCXXNeeded is the highest GLIBCXX_ version needed from libstdc++.
	GlibCXXNeeded string `json:"glibcxx_needed,omitempty"`
	SystemGlibc   string `json:"system_glibc,omitempty"`
	SystemLibc    string `json:"system_libc,omitempty"`
	GlibcOK       bool   `json:"glibc_ok"`
	GlibcWhy      string `json:"glibc_why"`
	RootGlibc     string `json:"root_glibc,omitempty"`
	// ProviderLibraries are the plug-in provider libraries beside it.
	ProviderLibraries map[string]bool `json:"provider_libraries,omitempty"`
}

type doctorBinary struct {
	Path        string `json:"path"`
	GOARCH      string `json:"goarch"`
	GlibcNeeded string `json:"glibc_needed,omitempty"`
}

type doctorStore struct {
	Path      string   `json:"path"`
	OK        bool     `json:"ok"`
	Error     string   `json:"error,omitempty"`
	Models    int      `json:"models"`
	Versions  int      `json:"versions"`
	Chunks    int      `json:"chunks"`
	Bytes     int64    `json:"chunk_bytes"`
	FileBytes int64    `json:"file_bytes"`
	FreeBytes int64    `json:"free_bytes"`
	Damaged   []string `json:"damaged,omitempty"`
}

type doctorProblem struct {
	Area  string `json:"area"`
	Issue string `json:"issue"`
	Fix   string `json:"fix,omitempty"`
}

func runDoctor(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("doctor")
	root := fs.String("root", "/", "directory to read proc/, sys/ and etc/ from (a fixture tree instead of this machine's)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	board := fs.String("board", "", "use this board profile instead of detecting one ("+strings.Join(platforms.ProfileIDs(), ", ")+")")
	lib := fs.String("lib", "", "ONNX Runtime library to check (default: $"+ort.LibraryEnv+", the make setup cache, system paths)")
	storePath := fs.String("store", "", "offline model store (bbolt file) to verify")
	noProviders := fs.Bool("no-providers", false, "do not load ONNX Runtime or try its providers")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	plan, err := platforms.Detect(platforms.DetectOptions{Root: *root, Board: *board})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if st, err := os.Stat(*root); err != nil || !st.IsDir() {
		return fmt.Errorf("%w: --root %s is not a directory", errUsage, *root)
	}
	r := doctor(ctx, plan, *root, *lib, *storePath, *noProviders)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	printDoctor(stdout, r)
	return nil
}

func doctor(ctx context.Context, plan platforms.Plan, root, lib, storePath string, noProviders bool) doctorReport {
	f := plan.Facts
	r := doctorReport{
		Root:   root,
		Board:  doctorBoard{ID: plan.Board, Name: plan.Name, Generic: plan.Generic, RecognisedBy: plan.RecognisedBy},
		CPU:    doctorCPU{Arch: f.CPU.Arch, Model: f.CPU.Model, Cores: f.CPU.CoreNames(), Processors: f.CPU.Processors, Physical: f.CPU.Cores, Capacity: f.Capacity, SIMD: f.CPU.SIMD()},
		Memory: doctorMemory{TotalBytes: f.Mem.TotalBytes, AvailableBytes: f.Mem.AvailableBytes},
		Plan: doctorPlan{Providers: plan.Providers, ProviderOrder: platforms.ProviderNames(plan.Providers), Threads: plan.Threads,
			KVBudgetBytes: plan.KV.Bytes, KVWhy: plan.KV.Why, ExpectedSensor: plan.Sensors},
		Notes:     plan.Notes,
		Providers: []platforms.ProviderCheck{},
		Problems:  []doctorProblem{},
	}
	if r.CPU.Arch == "" {
		r.CPU.Arch = "unknown (no /proc/cpuinfo)"
	}
	for _, w := range f.Warnings {
		r.problem("board files", w, "check that /proc and /sys are mounted and readable (in a container, bind-mount them)")
	}
	for _, w := range plan.Warnings[len(f.Warnings):] {
		r.problem("board "+plan.Board, w, "")
	}
	r.checkLibrary(root, lib)
	if exe, err := os.Executable(); err == nil {
		if info, err := platforms.InspectELF(exe); err == nil {
			r.Binary = &doctorBinary{Path: exe, GOARCH: info.GOARCH, GlibcNeeded: info.Glibc}
		}
	}
	switch {
	case noProviders:
		r.ProvidersNote = "not tried (--no-providers)"
	case !r.Library.Found:
		r.ProvidersNote = "not tried: no ONNX Runtime library (see onnxruntime.error)"
	default:
		r.checkProviders(ctx, plan)
	}
	r.Sensors = platforms.CheckSensors(ctx, plan)
	r.checkSensors(plan)
	if storePath != "" {
		r.checkStore(ctx, storePath)
	}
	return r
}

func (r *doctorReport) problem(area, issue, fix string) {
	r.Problems = append(r.Problems, doctorProblem{Area: area, Issue: issue, Fix: fix})
}

func (r *doctorReport) checkLibrary(root, explicit string) {
	l := &r.Library
	path, err := ort.FindLibrary(explicit)
	if err != nil {
		l.Error = err.Error()
		fix := "run `make setup` (ONNX Runtime " + ort.RuntimeVersion + " from npm) or set " + ort.LibraryEnv + " to a library built for this machine"
		switch {
		case errors.Is(err, ort.ErrLibraryArch):
			fix = "the file is for another CPU: use the linux-" + hostArch() + " build"
		case runtime.GOARCH == "arm":
			fix = "npm ships no linux/arm (armv7) ONNX Runtime: build ONNX Runtime from source for armhf and set " + ort.LibraryEnv + ", or use a 64-bit OS and the arm64 build"
		}
		r.problem("onnxruntime", firstLine(l.Error), fix)
		return
	}
	l.Found, l.Path = true, path
	info, err := platforms.InspectELF(path)
	if err != nil {
		l.Error = err.Error()
		r.problem("onnxruntime", l.Error, "point "+ort.LibraryEnv+" at libonnxruntime.so itself")
		return
	}
	l.Machine, l.GOARCH, l.Needed, l.GlibcNeeded, l.GlibCXXNeeded = info.Machine, info.GOARCH, info.Needed, info.Glibc, info.GlibCXX
	have, libc, gerr := platforms.SystemGlibc("/")
	l.SystemGlibc, l.SystemLibc = have, libc
	l.GlibcOK, l.GlibcWhy = platforms.GlibcCompatible(info.Glibc, have)
	if gerr != nil {
		l.GlibcWhy = gerr.Error()
	}
	if !l.GlibcOK && gerr == nil {
		r.problem("onnxruntime", "the library "+l.GlibcWhy, "use an ONNX Runtime built for this glibc (a vendor or distribution build) or a newer OS; for JetPack 5 see platforms/README.md")
	}
	if root != "/" {
		if v, _, err := platforms.SystemGlibc(root); err == nil {
			l.RootGlibc = v
			if ok, why := platforms.GlibcCompatible(info.Glibc, v); !ok {
				r.problem("onnxruntime", "on the --root system the library "+why, "use an ONNX Runtime built for that system's glibc")
			}
		} else {
			l.RootGlibc = "unknown: " + err.Error()
		}
	}
	l.ProviderLibraries = map[string]bool{}
	dir := filepath.Dir(path)
	for _, name := range []string{"libonnxruntime_providers_shared.so", "libonnxruntime_providers_cuda.so", "libonnxruntime_providers_tensorrt.so", "libonnxruntime_providers_openvino.so", "libonnxruntime_providers_qnn.so"} {
		_, err := os.Stat(filepath.Join(dir, name))
		l.ProviderLibraries[name] = err == nil
	}
}

func hostArch() string {
	if exe, err := os.Executable(); err == nil {
		if info, err := platforms.InspectELF(exe); err == nil && info.GOARCH != "" {
			return info.GOARCH
		}
	}
	return "this machine's architecture"
}

func (r *doctorReport) checkProviders(ctx context.Context, plan platforms.Plan) {
	if err := ort.Acquire(r.Library.Path); err != nil {
		r.Library.Error = err.Error()
		r.ProvidersNote = "not tried: the library does not load"
		r.problem("onnxruntime", firstLine(err.Error()), "check the library's architecture and glibc above; set "+ort.LibraryEnv+" to a working build")
		return
	}
	r.Library.Version = ort.Version()
	defer ort.Release()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a TensorRT build of the probe takes seconds, not minutes
	defer cancel()
	checks, err := platforms.CheckProviders(ctx, plan.Providers, ort.Options{LibraryPath: r.Library.Path, IntraOpThreads: 1})
	r.Providers = checks
	if err != nil {
		r.ProvidersNote = "the CPU reference run failed: " + err.Error()
		r.problem("onnxruntime", "the probe model does not run on the CPU provider: "+firstLine(err.Error()), "the library is broken or incompatible: reinstall it (make setup)")
		return
	}
	r.ProvidersNote = "tried on this machine's library, each provider alone on a probe model, output compared with the CPU provider's"
	if r.Root != "/" {
		r.ProvidersNote += " (the --root tree's board chose the order; its library is not checked)"
	}
	for _, c := range checks {
		if c.Status == "reference" || c.Status == "passed" {
			continue
		}
		if plan.Generic && c.Status == "skipped" {
			continue // on an unknown board every provider is tried: a skip is expected
		}
		r.problem("provider "+string(c.Provider), c.Status+": "+c.Reason, providerFix(plan, c, r.Library))
	}
}

func providerFix(plan platforms.Plan, c platforms.ProviderCheck, l doctorLibrary) string {
	switch {
	case c.Status == "mismatch":
		return "its output differs from the CPU's: leave it out of session.providers in the engine config until the library or driver is fixed"
	case strings.Contains(c.Reason, "provider library not found"):
		return fmt.Sprintf("put the %s provider library of ONNX Runtime %s (with libonnxruntime_providers_shared.so) beside %s, or set %s to a build that has them",
			c.Provider, cmp.Or(l.Version, "of the same version"), l.Path, ort.LibraryEnv)
	case strings.Contains(c.Reason, "not supported by this ONNX Runtime build"):
		return fmt.Sprintf("this library was built without %s: set %s to an ONNX Runtime build with it (board notes: see plan.notes)", c.Provider, ort.LibraryEnv)
	case strings.Contains(c.Reason, "cannot open shared object"), strings.Contains(c.Reason, "libcu"), strings.Contains(c.Reason, "libnv"):
		return "the provider needs system libraries that are missing (CUDA runtime, cuDNN, TensorRT or the driver): install them"
	}
	return "see the reason; the CPU provider runs what this provider cannot"
}

func (r *doctorReport) checkSensors(plan platforms.Plan) {
	warned := map[string]bool{}
	for _, w := range r.Sensors.Warnings {
		r.problem("sensors", w, "")
		for _, kind := range []string{"power", "thermal"} {
			if strings.HasPrefix(w, kind+" sensor") {
				warned[kind] = true
			}
		}
	}
	if len(r.Sensors.Power) == 0 && !warned["power"] {
		var can []string
		for _, s := range plan.Sensors {
			if s.Kind == "power" {
				can = append(can, s.Source+": "+s.Why)
			}
		}
		r.problem("sensors", "no power or energy sensor: energy per token and watts will be null in reports",
			cmp.Or(strings.Join(can, "; "), "configure a smart plug (Shelly address or Tasmota topic) for wall power"))
	}
	if len(r.Sensors.Thermal) == 0 && !warned["thermal"] {
		r.problem("sensors", "no readable thermal zone: throttling cannot be seen", "a VM or container may have none; on a board check that /sys/class/thermal is mounted")
	}
}

func (r *doctorReport) checkStore(ctx context.Context, path string) {
	s := &doctorStore{Path: path}
	r.Store = s
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		s.Error = "no store file"
		r.problem("store", path+": no such file", "import a model (edgeinfer models import) or fix --store")
		return
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &sfs); err == nil {
		s.FreeBytes = int64(sfs.Bavail) * int64(sfs.Bsize)
	}
	st, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		s.Error = err.Error()
		r.problem("store", err.Error(), "if it is locked, stop the process holding it; if it is corrupt, restore it or re-import the models")
		return
	}
	defer st.Close()
	if stats, err := st.Stats(ctx); err == nil {
		s.Models, s.Versions, s.Chunks, s.Bytes, s.FileBytes = stats.Models, stats.Versions, stats.Chunks, stats.ChunkBytes, stats.FileBytes
	}
	rep, err := st.Verify(ctx, nil)
	for _, d := range rep.Damaged {
		s.Damaged = append(s.Damaged, d.String())
	}
	if err != nil {
		s.Error = err.Error()
		r.problem("store", fmt.Sprintf("%d damaged records: %s", len(rep.Damaged), firstLine(err.Error())), "re-import or re-fetch the damaged models (an update agent re-downloads missing chunks); run edgeinfer models verify")
		return
	}
	s.OK = true
	if s.FreeBytes > 0 && s.FreeBytes < 256<<20 {
		r.problem("store", fmt.Sprintf("only %d MiB free beside the store", s.FreeBytes>>20), "free disk space: an update needs room for the chunks it lacks")
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func printDoctor(w io.Writer, r doctorReport) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	how := "recognised"
	if r.Board.Generic {
		how = "not recognised"
	}
	p("board      %s (%s) — %s", r.Board.ID, r.Board.Name, how)
	for _, e := range r.Board.RecognisedBy {
		p("             %s", e)
	}
	cores := ""
	if r.CPU.Cores != "" {
		cores = " [" + r.CPU.Cores + "]"
	}
	model := ""
	if r.CPU.Model != "" {
		model = " " + r.CPU.Model
	}
	p("cpu        %s%s, %d logical / %d physical%s; simd %s", r.CPU.Arch, model, r.CPU.Processors, r.CPU.Physical, cores, cmp.Or(strings.Join(r.CPU.SIMD, " "), "none listed"))
	if len(r.CPU.Capacity) > 0 {
		p("             cpu_capacity %v", r.CPU.Capacity)
	}
	p("memory     %d MiB total, %d MiB available", r.Memory.TotalBytes>>20, r.Memory.AvailableBytes>>20)
	p("plan       providers %s", r.Plan.ProviderOrder)
	p("           threads %d: %s", r.Plan.Threads.IntraOp, r.Plan.Threads.Why)
	if r.Plan.Threads.Affinity != "" {
		p("             session.intra_op_thread_affinities=%s", r.Plan.Threads.Affinity)
	}
	p("           kv budget %d MiB: %s", r.Plan.KVBudgetBytes>>20, r.Plan.KVWhy)
	l := r.Library
	if l.Found {
		p("onnxruntime %s %s (%s)", l.Path, cmp.Or(l.Version, "version not loaded"), l.Machine)
		p("           glibc: %s (system %s); libstdc++ GLIBCXX_%s", l.GlibcWhy, cmp.Or(l.SystemLibc, "?"), cmp.Or(l.GlibCXXNeeded, "none"))
		var have []string
		for _, name := range slices.Sorted(maps.Keys(l.ProviderLibraries)) {
			if l.ProviderLibraries[name] {
				have = append(have, name)
			}
		}
		p("           provider libraries beside it: %s", cmp.Or(strings.Join(have, ", "), "none"))
	} else {
		p("onnxruntime not found: %s", firstLine(l.Error))
	}
	if r.Binary != nil {
		p("binary     %s (%s) needs glibc %s", r.Binary.Path, r.Binary.GOARCH, cmp.Or(r.Binary.GlibcNeeded, "nothing versioned"))
	}
	p("providers  %s", r.ProvidersNote)
	for _, c := range r.Providers {
		line := fmt.Sprintf("  %-9s %s", c.Provider, c.Status)
		if c.MaxAbsDiff != nil {
			line += fmt.Sprintf(" (max diff %.2g, load %.1f ms, run %.2f ms)", *c.MaxAbsDiff, c.LoadMS, c.RunMS)
		} else if c.Status == "reference" {
			line += fmt.Sprintf(" (load %.1f ms, run %.2f ms)", c.LoadMS, c.RunMS)
		}
		if c.Reason != "" {
			line += ": " + c.Reason
		}
		p("%s", line)
	}
	s := r.Sensors
	p("sensors    power: %d, thermal: %d, frequency: %d; primary %s", len(s.Power), len(s.Thermal), len(s.Frequency), cmp.Or(s.Primary, "none"))
	for _, ps := range s.Power {
		partial := ""
		if ps.Partial {
			partial = ", partial"
		}
		p("  power    %s (%s%s)", ps.Name, ps.Scope, partial)
	}
	for _, t := range s.Thermal {
		p("  thermal  %s", t)
	}
	for _, fd := range s.Frequency {
		p("  freq     %s", fd)
	}
	for _, u := range s.Absent {
		where := ""
		if u.Path != "" {
			where = " (" + u.Path + ")"
		}
		p("  absent   %s%s: %s", u.Source, where, u.Reason)
	}
	if st := r.Store; st != nil {
		if st.OK {
			p("store      %s ok: %d models, %d versions, %d chunks (%d MiB), %d MiB free", st.Path, st.Models, st.Versions, st.Chunks, st.Bytes>>20, st.FreeBytes>>20)
		} else {
			p("store      %s: %s", st.Path, st.Error)
		}
	}
	for _, n := range r.Notes {
		p("note       %s", n)
	}
	if len(r.Problems) == 0 {
		p("problems   none")
		return
	}
	p("problems   %d", len(r.Problems))
	for i, pr := range r.Problems {
		p("%3d. [%s] %s", i+1, pr.Area, pr.Issue)
		if pr.Fix != "" {
			p("     → %s", pr.Fix)
		}
	}
}

// applyBoard puts a board profile onto cfg (bench --board): "auto" detects
// the board; flags given explicitly stay as overrides, and the report's
// version matrix shows which is which.
func applyBoard(fs *flag.FlagSet, board string, cfg *engine.Config) error {
	opts := platforms.DetectOptions{}
	if board != "auto" {
		opts.Board = board
	}
	plan, err := platforms.Detect(opts)
	if err != nil {
		return fmt.Errorf("%w: --board: %v", errUsage, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["threads"] {
		cfg.Session.IntraOpThreads = 0 // the flag's default: let the profile choose
	}
	platforms.Apply(plan, cfg)
	return nil
}
