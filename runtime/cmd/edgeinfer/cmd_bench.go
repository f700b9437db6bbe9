//go:build cgo

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/loadgen"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "run the acceptance benchmark (a profile or a workload spec) and write report.json/.md/.html",
		run:     runBench,
	})
}

// benchIsTTY reports whether w is a terminal (progress bar) or not (plain
// lines); a variable so tests can force either.
var benchIsTTY = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func runBench(ctx context.Context, stdout io.Writer, args []string) error {
	if len(args) > 0 && args[0] == "compare" {
		return runBenchCompare(stdout, args[1:])
	}
	fs := newFlagSet("bench")
	model := fs.String("model", "", "model bundle directory, or NAME[@VERSION] with --store, or the served model's name with --target (required)")
	target := fs.String("target", "", "benchmark an OpenAI-compatible server at this URL (edgeinfer serve, llama-server, Ollama, vLLM) instead of an in-process engine")
	token := fs.String("token", os.Getenv("EDGEINFER_TOKEN"), "bearer token for --target (default $EDGEINFER_TOKEN)")
	promptIDs := fs.Int("prompt-ids", 0, "with --target: send prompts as token ids below this vocabulary `size` (the same tokens to any server; for models served without a tokenizer)")
	tokPath := fs.String("tokenizer", "", "with --target: tokenizer.json to write prompts with (and to read --corpus); default: words of a fixed vocabulary")
	storePath := fs.String("store", "", "offline model store (bbolt file) that --model names a model in")
	profile := fs.String("profile", "", "built-in workload: "+strings.Join(loadgen.ProfileNames(), ", "))
	specPath := fs.String("spec", "", "workload spec file (YAML or JSON; see go doc runtime/loadgen)")
	out := fs.String("out", "bench-out", "directory for report.json, report.md and report.html")
	sweep := fs.Bool("sweep", false, "find the max stable concurrency (adds a coarse sweep when the spec has none)")
	corpus := fs.String("corpus", "", "comma-separated text files to draw prompts from (overrides the spec's)")
	threads := fs.Int("threads", 2, "ONNX Runtime intra-op threads")
	kvBudget := fs.Int64("kv-budget", 0, "KV cache bytes (0 = engine default, 256 MiB)")
	board := fs.String("board", "", "apply a board profile's providers, threads and KV budget: auto (detect) or a profile ID; flags set explicitly win")
	kvPrefault := fs.Bool("kv-prefault", true, "commit the KV budget at start so measured steps pay no first-touch page faults")
	sample := fs.String("show-sample", "", "before the run, stream the answer to this prompt")
	sampleTokens := fs.Int("sample-tokens", 60, "tokens for --show-sample")
	heapProfile := fs.String("heap-profile", "", "after the run, with the engine still open, write the Go heap's live objects (pprof) to this `file`: where a soak's Go memory went")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if *model == "" {
		return fmt.Errorf("%w: --model is required", errUsage)
	}
	spec, err := benchSpec(*profile, *specPath)
	if err != nil {
		return err
	}
	if *corpus != "" {
		spec.Prompts.Corpus = strings.Split(*corpus, ",")
	}
	if *sweep && spec.Sweep == nil {
		spec.Sweep = loadgen.DefaultSweep()
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	if *target != "" {
		return benchTarget(ctx, stdout, spec, *target, *model, *token, *tokPath, *promptIDs, *out)
	}

	check := func() error { return needBundleDir(*model) }
	if *storePath != "" {
		check = func() error { return needStore(*storePath) }
	}
	if err := check(); err != nil {
		return err
	}

	mspec := engine.ModelSpec{Dir: *model}
	if *storePath != "" {
		mspec = engine.ModelSpec{Ref: *model}
	}
	cfg := engine.Config{Models: []engine.ModelSpec{mspec}, Store: *storePath, KV: engine.KVOptions{BudgetBytes: *kvBudget, Prefault: *kvPrefault}}
	cfg.Session.IntraOpThreads = *threads
	if *board != "" {
		if err := applyBoard(fs, *board, &cfg); err != nil {
			return err
		}
	}
	eng, err := engine.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())
	if *sample != "" {
		if err := streamSample(ctx, stdout, eng, *sample, *sampleTokens); err != nil {
			return err
		}
	}

	return benchRun(ctx, stdout, func(ctx context.Context, spec loadgen.Spec, opt loadgen.Options) (*loadgen.Result, error) {
		res, err := loadgen.Run(ctx, eng, spec, opt)
		if err == nil && *heapProfile != "" {
			err = writeHeapProfile(*heapProfile)
		}
		return res, err
	}, spec, loadgen.Options{EngineConfig: &cfg}, *out)
}

// benchTarget runs spec against a remote OpenAI-compatible server.
func benchTarget(ctx context.Context, stdout io.Writer, spec loadgen.Spec, url, model, token, tokPath string, promptIDs int, out string) error {
	opt := loadgen.HTTPOptions{Token: token, PromptIDs: promptIDs}
	if tokPath != "" {
		tok, err := tokenizer.Load(tokPath)
		if err != nil {
			return err
		}
		opt.Tokenizer = tok
	}
	t, err := loadgen.NewHTTPTarget(ctx, url, model, opt)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "target %s, model %s (server %q)\n", url, model, t.Info().Server)
	return benchRun(ctx, stdout, func(ctx context.Context, spec loadgen.Spec, opt loadgen.Options) (*loadgen.Result, error) {
		return loadgen.RunTarget(ctx, t, spec, opt)
	}, spec, loadgen.Options{}, out)
}

// benchRun runs spec with a progress display and writes the report.
func benchRun(ctx context.Context, stdout io.Writer, run func(context.Context, loadgen.Spec, loadgen.Options) (*loadgen.Result, error), spec loadgen.Spec, opt loadgen.Options, out string) error {
	tty := benchIsTTY(stdout)
	fmt.Fprintf(stdout, "bench %q: %d phases, %s planned", spec.Name, len(spec.Phases), planned(spec))
	if spec.Sweep != nil {
		fmt.Fprintf(stdout, " + sweep (≤ %d trials of %s)", max(spec.Sweep.MaxTrials, 1), spec.Sweep.Trial.D())
	}
	fmt.Fprintln(stdout)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	prog := newBenchProgress(stdout, tty)
	opt.Progress = prog.update
	opt.TimelineFile = filepath.Join(out, "timelines.jsonl")
	res, err := run(ctx, spec, opt)
	prog.done()
	if err != nil {
		return err
	}
	rep := loadgen.BuildReport(res)
	if err := rep.WriteDir(out); err != nil {
		return err
	}
	printBenchSummary(stdout, rep)
	abs, _ := filepath.Abs(filepath.Join(out, "report.html"))
	fmt.Fprintf(stdout, "report: %s (and report.json, report.md, timelines.jsonl beside it)\n", abs)
	return nil
}

func benchSpec(profile, path string) (loadgen.Spec, error) {
	switch {
	case profile != "" && path != "":
		return loadgen.Spec{}, fmt.Errorf("%w: --profile and --spec are exclusive", errUsage)
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return loadgen.Spec{}, err
		}
		s, err := loadgen.ParseSpec(b)
		if err != nil {
			return loadgen.Spec{}, fmt.Errorf("%s: %w", path, err)
		}
		return s, nil
	}
	if profile == "" {
		profile = "demo"
	}
	mk, ok := loadgen.Profiles[profile]
	if !ok {
		return loadgen.Spec{}, fmt.Errorf("%w: unknown profile %q (have %s)", errUsage, profile, strings.Join(loadgen.ProfileNames(), ", "))
	}
	s := mk()
	return s, s.Resolve()
}

func planned(s loadgen.Spec) time.Duration {
	d := s.Warmup.D() + 2*s.Idle.D()
	for _, p := range s.Phases {
		d += p.Duration.D()
	}
	return d
}

// streamSample prints one generated answer as it streams.
func streamSample(ctx context.Context, w io.Writer, eng *engine.Engine, prompt string, n int) error {
	name := eng.Models()[0].Name
	if eng.Tokenizer(name) == nil {
		fmt.Fprintf(w, "(no sample: model %q has no tokenizer)\n\n", name)
		return nil
	}
	fmt.Fprintf(w, "%s", prompt)
	count, start := 0, time.Now()
	for tok, err := range eng.Generate(ctx, name, prompt, engine.GenerateOptions{MaxTokens: n}).Tokens() {
		if err != nil {
			return err
		}
		fmt.Fprint(w, tok.Text)
		count++
	}
	fmt.Fprintf(w, "\n[%d tokens in %s]\n\n", count, time.Since(start).Round(time.Millisecond))
	return nil
}

// benchProgress draws a bar on a terminal, or a plain line per stage change
// (and every 10 s) otherwise. update is called from one goroutine.
type benchProgress struct {
	mu        sync.Mutex
	w         io.Writer
	tty       bool
	stage     string
	lastPlain time.Duration
	drawn     bool
}

func newBenchProgress(w io.Writer, tty bool) *benchProgress { return &benchProgress{w: w, tty: tty} }

func (p *benchProgress) update(s loadgen.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		frac := 0.0
		if s.Total > 0 {
			frac = min(float64(s.Elapsed)/float64(s.Total), 1)
		}
		const width = 30
		n := int(frac * width)
		fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %-22s sent %d done %d queued %d running %d ",
			strings.Repeat("#", n), strings.Repeat(".", width-n), frac*100, truncStage(s.Stage), s.Sent, s.Finished, s.Queued, s.Running)
		p.drawn = true
		return
	}
	if s.Stage != p.stage || s.Elapsed-p.lastPlain >= 10*time.Second {
		fmt.Fprintf(p.w, "%6.1fs %-22s sent %d done %d queued %d running %d\n",
			s.Elapsed.Seconds(), s.Stage, s.Sent, s.Finished, s.Queued, s.Running)
		p.stage, p.lastPlain = s.Stage, s.Elapsed
	}
}

func truncStage(s string) string {
	if len(s) > 22 {
		return s[:22]
	}
	return s
}

func (p *benchProgress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

func printBenchSummary(w io.Writer, r *loadgen.Report) {
	o := &r.Overall
	f := func(v *float64, prec int) string {
		if v == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.*f", prec, *v)
	}
	fmt.Fprintf(w, "\n== %s: %s ==\n", r.Name, strings.ToUpper(r.Status))
	fmt.Fprintf(w, "requests      %d over %.1f s\n", o.Requests, o.WallS)
	fmt.Fprintf(w, "TTFT          p50 %s ms  p99 %s ms\n", f(o.TTFTMs.P50, 1), f(o.TTFTMs.P99, 1))
	fmt.Fprintf(w, "TPOT          p50 %s ms  p99 %s ms\n", f(o.TPOTMs.P50, 2), f(o.TPOTMs.P99, 2))
	fmt.Fprintf(w, "goodput       %s tok/s (throughput %s tok/s)\n", f(o.GoodputTokS, 1), f(o.ThroughputTokS, 1))
	fmt.Fprintf(w, "SLO attained  %s of requests\n", f(o.SLOAttainment, 3))
	switch {
	case r.Sweep == nil:
		fmt.Fprintf(w, "max stable    not swept (use --sweep)\n")
	case r.MaxStableConcurrency != nil:
		fmt.Fprintf(w, "max stable    concurrency %s (%d sweep trials)\n", r.Sweep.MaxStableText(), len(r.Sweep.Points))
	case r.MaxStableRate != nil:
		fmt.Fprintf(w, "max stable    rate %s\n", r.Sweep.MaxStableText())
	default:
		fmt.Fprintf(w, "max stable    none: the lowest load already failed the SLOs\n")
	}
	if rr := r.Resources; rr != nil && rr.Known && len(rr.Windows) > 0 {
		maxRSS, maxG := 0.0, 0
		for _, win := range rr.Windows {
			maxRSS, maxG = max(maxRSS, win.RSSMiB), max(maxG, win.Goroutines)
		}
		fmt.Fprintf(w, "engine        RSS max %.1f MiB, goroutines max %d, %d windows; RSS trend %s\n", maxRSS, maxG, len(rr.Windows), rr.TrendText())
	} else if rr != nil {
		fmt.Fprintf(w, "engine        resources unknown: %s\n", rr.Reason)
	}
	if r.Power.EnergyJ == nil {
		fmt.Fprintf(w, "power         unavailable (energy_j null):\n")
		for _, u := range r.Power.UnavailableReasons {
			fmt.Fprintf(w, "              - %s: %s\n", u.Source, u.Reason)
		}
	} else {
		fmt.Fprintf(w, "power         %.2f J, avg %s W (%s, %s)\n", *r.Power.EnergyJ, f(r.Power.AvgW, 2), r.Power.Source, r.Power.Scope)
	}
	for _, v := range r.Verdicts {
		fmt.Fprintf(w, "verdict       %-7s %s — %s\n", v.Status, v.Threshold, v.Reason)
	}
}

const benchCompareUsage = `usage: edgeinfer bench compare [--out DIR] LABEL=REPORT_DIR LABEL=REPORT_DIR...

Puts bench reports of the same profile side by side (edgeinfer serve and
llama-server measured with --target, say): goodput at SLO, max stable
concurrency, latency quantiles and verdicts, each column's ratio to the
first. Writes compare.json and compare.md to --out and prints the table.`

func runBenchCompare(stdout io.Writer, args []string) error {
	fs := newFlagSet("bench compare")
	out := fs.String("out", "", "directory for compare.json and compare.md (default: print only)")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), benchCompareUsage); fs.PrintDefaults() }
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		fs.Usage()
		return fmt.Errorf("%w: two reports or more", errUsage)
	}
	var labels, dirs []string
	var reps []*loadgen.Report
	for _, a := range pos {
		label, dir, ok := strings.Cut(a, "=")
		if !ok {
			label, dir = filepath.Base(a), a
		}
		r, err := loadgen.ReadReport(dir)
		if err != nil {
			return err
		}
		labels, dirs, reps = append(labels, label), append(dirs, dir), append(reps, r)
	}
	c, err := loadgen.Compare(labels, dirs, reps)
	if err != nil {
		return err
	}
	if *out != "" {
		if err := c.WriteDir(*out); err != nil {
			return err
		}
	}
	return c.WriteMarkdown(stdout)
}
