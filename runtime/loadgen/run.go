package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/clock"
	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/pkg/power"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// Options configures Run beyond the spec: what is not plain data, or
// belongs to the machine rather than the workload.
type Options struct {
	// EngineConfig is the configuration the engine was opened with, for
	// the report's version matrix (threads, KV budget, prefix cache).
	EngineConfig *engine.Config
	// PowerFS is the file system the power probe reads, rooted at "/";
	// nil means os.DirFS("/").
	PowerFS fs.FS
	// Power configures the probe (smart plugs).
	Power power.ProbeOptions
	// PowerPeriod is the sampling period; zero means 20 Hz.
	PowerPeriod time.Duration
	// SeriesPeriod is how often queue depth and token counts are sampled
	// for the report's timeline; zero means 250 ms.
	SeriesPeriod time.Duration
	// Progress, when set, is called from one goroutine at every series
	// tick and phase change.
	Progress func(Progress)
	// Logger receives the run's logs; nil discards them.
	Logger *slog.Logger
	// TimelineFile is where every phase request's timeline is streamed
	// as JSON lines (the report reads it back for its request chart); ""
	// means a temporary file, removed by Result.Close.
	TimelineFile string
}

// Progress is a snapshot for a progress display.
type Progress struct {
	Stage     string // "warmup", a phase name, or "sweep"
	Elapsed   time.Duration
	Total     time.Duration // planned duration of warm-up and phases
	Sent      int64
	Finished  int64
	Queued    int
	Running   int
	SweepStep string
}

// PhaseRun is one phase as it ran.
type PhaseRun struct {
	Phase      Phase
	Start, End time.Time
	// Requests accumulates the requests that arrived during the phase.
	Requests *metrics.Accumulator
}

// SeriesPoint is one sample of the engine's state during the run.
type SeriesPoint struct {
	At           time.Time
	Queued       int
	Running      int
	DecodeTokens uint64
	// Resources: the engine's resident memory, goroutines and KV blocks
	// in use (summed over decoders); Known is false where they cannot be
	// read (a remote server that does not expose them).
	Resources Resources
}

// Resources is the engine process's footprint at one moment.
type Resources struct {
	Known        bool
	RSSBytes     int64
	Goroutines   int
	KVBlocksUsed int
	// GoHeapBytes is the Go heap's live and not yet swept objects, and
	// GoMappedBytes everything the Go runtime holds from the OS and has
	// not returned (heap, stacks, its own metadata); 0 when unknown (a
	// remote engine). RSS above GoMappedBytes is memory outside Go: ONNX
	// Runtime's allocations through the C heap, the model's weights,
	// mapped files.
	GoHeapBytes, GoMappedBytes int64
}

// maxSeries bounds the samples kept: past it, every other one is dropped
// (the token counter is cumulative, so rates over the kept ones stay
// right) and the period doubles in effect.
const maxSeries = 2000

// Result is everything a run observed; BuildReport digests it.
type Result struct {
	Spec       Spec
	Model      string
	Start, End time.Time
	// Warmup, each phase and Overall (every phase's requests) are
	// accumulated as they finish; the timelines themselves are in
	// TimelineFile (Requests of them).
	Warmup       *metrics.Accumulator
	Phases       []PhaseRun
	Overall      *metrics.Accumulator
	TimelineFile string
	Requests     int
	tempFile     bool
	Series       []SeriesPoint
	Sweep        *SweepResult
	Power        power.Report
	// PowerTrace (W, primary source) and TempTrace (°C, hottest zone)
	// are the sampler's series over the run; empty without a sensor.
	PowerTrace   []power.TracePoint
	TempTrace    []power.TracePoint
	Models       []engine.ModelInfo
	Sched        engine.SchedulerConfig
	EngineConfig *engine.Config
	KV           map[string]engine.KVStats
	PromptSource string
	// ClientErrors counts the errors requests ended with, by message
	// (overload rejections, timeouts); each request is also in the records.
	ClientErrors map[string]int
	// Target is what a remote server said about itself (an HTTPTarget
	// run); nil in-process.
	Target *TargetInfo
	Notes  []string
}

// Close removes the timeline file when Run made a temporary one.
func (r *Result) Close() error {
	if r.tempFile && r.TimelineFile != "" {
		return os.Remove(r.TimelineFile)
	}
	return nil
}

// Run executes spec against e: warm-up, the phases in order, then the
// sweep when the spec has one, with the power sampler running throughout
// and an idle baseline before and after. It returns when every request it
// started has finished; cancelling ctx ends the run early with ctx's error.
func Run(ctx context.Context, e Engine, spec Spec, opt Options) (*Result, error) {
	return run(ctx, inProcess{e}, spec, opt)
}

// RunTarget is Run against a remote server: the same phases, sweep and
// verdicts, with the timelines stamped on the client (see HTTPTarget).
func RunTarget(ctx context.Context, t *HTTPTarget, spec Spec, opt Options) (*Result, error) {
	return run(ctx, t, spec, opt)
}

func run(ctx context.Context, b backend, spec Spec, opt Options) (*Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	r, err := newRunner(b, spec, opt)
	if err != nil {
		return nil, err
	}
	return r.run(ctx)
}

// runner holds one run's state. Its counters are atomics because request
// goroutines update them; everything else is owned by the run goroutine.
type runner struct {
	e       backend
	spec    Spec
	opt     Options
	log     *slog.Logger
	model   string
	work    *workload
	genOpts engine.GenerateOptions

	wg       sync.WaitGroup // request goroutines
	col      *collector
	sent     atomic.Int64
	finished atomic.Int64
	errMu    sync.Mutex
	errs     map[string]int

	stage      atomic.Value // string
	start      time.Time
	plannedDur time.Duration
}

func newRunner(e backend, spec Spec, opt Options) (*runner, error) {
	model, vocab, err := pickModel(e.Models(), spec.Model)
	if err != nil {
		return nil, err
	}
	w, err := newWorkload(&spec, e.Tokenizer(model), vocab)
	if err != nil {
		return nil, err
	}
	r := &runner{
		e: e, spec: spec, opt: opt, model: model, work: w,
		log:  opt.Logger,
		errs: map[string]int{},
		genOpts: engine.GenerateOptions{
			Class: classOf(spec.Class),
			SLO:   engine.SLO{TTFT: spec.SLO.TTFT.D(), TPOT: spec.SLO.TPOT.D(), Deadline: spec.SLO.E2E.D()},
		},
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.plannedDur = spec.Warmup.D()
	for _, p := range spec.Phases {
		r.plannedDur += p.Duration.D()
	}
	r.stage.Store("start")
	return r, nil
}

func pickModel(models []engine.ModelInfo, name string) (string, int, error) {
	for _, m := range models {
		if m.Kind != "decoder" || (name != "" && m.Name != name) {
			continue
		}
		vocab := 0
		if m.Geometry != nil {
			vocab = m.Geometry.Vocab
		}
		if vocab <= 0 {
			return "", 0, fmt.Errorf("%w: %q has no vocabulary size", ErrModel, m.Name)
		}
		return m.Name, vocab, nil
	}
	if name == "" {
		return "", 0, fmt.Errorf("%w: the engine has no decoder", ErrModel)
	}
	return "", 0, fmt.Errorf("%w: %q", ErrModel, name)
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	res := &Result{Spec: r.spec, Model: r.model, Models: r.e.Models(), Sched: r.e.Scheduler(),
		EngineConfig: r.opt.EngineConfig, PromptSource: r.work.source}
	defer r.wg.Wait()
	if t, ok := r.e.(interface{ Info() TargetInfo }); ok {
		info := t.Info()
		res.Target = &info
		res.Notes = append(res.Notes, "remote target "+info.URL+": latencies are stamped on the client (they include the network and HTTP); "+
			"the machine fields of the version matrix describe the machine running the harness")
	}

	fsys := r.opt.PowerFS
	if fsys == nil {
		fsys = os.DirFS("/")
	}
	sampler := power.NewSampler(power.Probe(ctx, fsys, r.opt.Power), power.SamplerOptions{Period: r.opt.PowerPeriod, Logger: r.log})
	defer sampler.Close()
	if err := sampler.Start(ctx); err != nil {
		return nil, fmt.Errorf("loadgen: power sampler: %w", err)
	}
	col, err := newCollector(r.opt.TimelineFile)
	if err != nil {
		return nil, err
	}
	r.col = col
	res.TimelineFile, res.tempFile = col.file.Name(), r.opt.TimelineFile == ""
	defer func() {
		if cerr := col.close(); cerr != nil && res != nil {
			res.Notes = append(res.Notes, cerr.Error())
		}
	}()
	// Records of this run's requests only: the observer starts now.
	defer r.e.Observe(col)()
	var idleBefore, idleAfter power.Span
	if r.spec.Idle > 0 {
		idleBefore.Start = time.Now()
		if err := clock.Sleep(ctx, r.spec.Idle.D()); err != nil {
			return nil, err
		}
		idleBefore.End = time.Now()
	}

	r.start = time.Now()
	res.Start = r.start
	seriesDone := make(chan struct{})
	seriesOut := make(chan []SeriesPoint, 1)
	go r.series(seriesDone, seriesOut)

	err = r.runPhases(ctx, res)
	if err == nil && r.spec.Sweep != nil {
		r.stage.Store("sweep")
		res.Sweep, err = r.sweep(ctx)
	}
	res.End = time.Now()
	close(seriesDone)
	res.Series = <-seriesOut
	if err != nil {
		_ = res.Close()
		return nil, err
	}
	if r.spec.Idle > 0 {
		idleAfter.Start = time.Now()
		if err := clock.Sleep(ctx, r.spec.Idle.D()); err != nil {
			_ = res.Close()
			return nil, err
		}
		idleAfter.End = time.Now()
	}
	sampler.Stop()
	runSpan := power.Span{Start: res.Start, End: res.End}
	res.Power = sampler.Report(runSpan, idleBefore, idleAfter)
	res.PowerTrace, res.TempTrace = sampler.PowerTrace(runSpan), sampler.TempTrace(runSpan)
	st := r.e.Stats()
	res.KV = map[string]engine.KVStats{}
	for name, kv := range st.KV {
		res.KV[name] = kv
	}
	r.errMu.Lock()
	res.ClientErrors = r.errs
	r.errMu.Unlock()
	if st.Scheduler.RecordsDropped > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("the engine dropped %d records (MaxRecords): statistics miss those requests", st.Scheduler.RecordsDropped))
	}
	return res, nil
}

// runPhases runs the warm-up and every phase, then drains.
func (r *runner) runPhases(ctx context.Context, res *Result) error {
	if r.spec.Warmup > 0 {
		r.stage.Store("warmup")
		res.Warmup = metrics.NewAccumulator(metrics.SummaryOptions{})
		wctx, cancel := context.WithCancel(ctx)
		start := time.Now()
		r.col.add(sink{start: start, acc: res.Warmup, phase: -1})
		r.closed(ctx, wctx, start, r.spec.Warmup.D(), 1, 1)
		err := r.drain(ctx, cancel)
		if err != nil {
			return err
		}
		r.settle()
	}
	// Requests get a context of their own so that the drain can cancel
	// stragglers without cancelling the run.
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := metrics.SummaryOptions{Window: r.spec.window(), MinWindowSamples: 5}
	for i, p := range r.spec.Phases {
		r.stage.Store(p.Name)
		start := time.Now()
		if i == 0 {
			o := opts
			o.Start = start
			res.Overall = metrics.NewAccumulator(o)
			r.col.mu.Lock()
			r.col.overall = res.Overall
			r.col.mu.Unlock()
		}
		o := opts
		o.Start = start
		res.Phases = append(res.Phases, PhaseRun{Phase: p, Start: start, Requests: metrics.NewAccumulator(o)})
		r.col.add(sink{start: start, acc: res.Phases[i].Requests, phase: i})
		if err := r.phase(ctx, reqCtx, start, p, &res.Notes); err != nil {
			return err
		}
		res.Phases[i].End = time.Now()
	}
	r.stage.Store("drain")
	if err := r.drain(ctx, cancel); err != nil {
		return err
	}
	r.settle()
	r.col.mu.Lock()
	r.col.overall = nil
	res.Requests = r.col.n
	r.col.mu.Unlock()
	return nil
}

// drain waits for every request started so far, calling cancel (which
// ends their context) once the spec's drain time has passed, and always on
// return.
func (r *runner) drain(ctx context.Context, cancel context.CancelFunc) error {
	defer cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	t := time.NewTimer(r.spec.drain())
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.log.Warn("loadgen: drain timed out; cancelling running requests")
		cancel()
		<-done
	case <-ctx.Done():
		<-done
		return ctx.Err()
	}
	return ctx.Err()
}

// phase generates one phase's arrivals until its end. Requests still
// running at the end go on into the next phase (as they would in service).
func (r *runner) phase(ctx, reqCtx context.Context, start time.Time, p Phase, notes *[]string) error {
	a, d := p.Arrival, p.Duration.D()
	switch a.Mode {
	case "closed":
		to := a.ConcurrencyTo
		if to == 0 {
			to = a.Concurrency
		}
		r.closed(ctx, reqCtx, start, d, a.Concurrency, to)
	case "poisson":
		to := a.RateTo
		if to == 0 {
			to = a.Rate
		}
		r.poisson(ctx, reqCtx, start, d, a.Rate, to)
	case "burst":
		var bg sync.WaitGroup
		if a.Rate > 0 {
			bg.Go(func() { r.poisson(ctx, reqCtx, start, d, a.Rate, a.Rate) })
		}
		for k := 0; ; k++ {
			at := start.Add(time.Duration(k) * a.BurstEvery.D())
			if !at.Before(start.Add(d)) || sleepUntil(ctx, at) != nil {
				break
			}
			for range a.BurstSize {
				r.launch(reqCtx)
			}
		}
		bg.Wait()
		_ = sleepUntil(ctx, start.Add(d))
	case "trace":
		f, err := os.Open(a.Trace)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrTrace, err)
		}
		offs, err := ParseTrace(f)
		f.Close()
		if err != nil {
			return err
		}
		skipped := 0
		for _, off := range offs {
			if off >= d {
				skipped++
				continue
			}
			if sleepUntil(ctx, start.Add(off)) != nil {
				break
			}
			r.launch(reqCtx)
		}
		if skipped > 0 {
			*notes = append(*notes, fmt.Sprintf("phase %s: %d trace offsets beyond its %s were not sent", p.Name, skipped, d))
		}
		_ = sleepUntil(ctx, start.Add(d))
	}
	return ctx.Err()
}

// closed runs a closed loop whose client count moves linearly from `from`
// to `to` over d: client i sends while the target count exceeds i.
func (r *runner) closed(ctx, reqCtx context.Context, start time.Time, d time.Duration, from, to int) {
	end := start.Add(d)
	target := func(now time.Time) float64 {
		f := float64(now.Sub(start)) / float64(d)
		return float64(from) + (float64(to)-float64(from))*min(max(f, 0), 1)
	}
	var clients sync.WaitGroup
	for i := range max(from, to) {
		clients.Go(func() {
			for {
				now := time.Now()
				if !now.Before(end) || ctx.Err() != nil {
					return
				}
				if target(now) <= float64(i) {
					_ = clock.Sleep(ctx, min(50*time.Millisecond, end.Sub(now)))
					continue
				}
				r.wg.Add(1)
				r.one(reqCtx)
			}
		})
	}
	clients.Wait()
}

// poisson sends independent arrivals at a rate moving linearly from `from`
// to `to` per second over d.
func (r *runner) poisson(ctx, reqCtx context.Context, start time.Time, d time.Duration, from, to float64) {
	end := start.Add(d)
	next := start
	for {
		f := float64(next.Sub(start)) / float64(d)
		rate := from + (to-from)*min(max(f, 0), 1)
		next = next.Add(time.Duration(r.work.exp(rate) * float64(time.Second)))
		if !next.Before(end) || sleepUntil(ctx, next) != nil {
			break
		}
		r.launch(reqCtx)
	}
	_ = sleepUntil(ctx, end)
}

// launch starts one request in its own goroutine, joined by r.wg.
func (r *runner) launch(ctx context.Context) {
	r.wg.Add(1)
	go r.one(ctx)
}

// one runs one request to its end; the caller has done r.wg.Add(1).
func (r *runner) one(ctx context.Context) {
	defer r.wg.Done()
	prompt, maxTokens, failFast := r.work.nextRequest()
	ctx, cancel := context.WithTimeout(ctx, r.spec.requestTimeout())
	defer cancel()
	opts := r.genOpts
	opts.MaxTokens, opts.FailFast = maxTokens, failFast
	r.sent.Add(1)
	for _, err := range r.e.generate(ctx, r.model, prompt, opts) {
		if err != nil {
			msg := err.Error()
			var oe *engine.OverloadError
			if errors.As(err, &oe) {
				msg = "overloaded"
				if oe.QueueFull {
					msg = "queue full"
				}
			}
			r.errMu.Lock()
			r.errs[msg]++
			r.errMu.Unlock()
			break
		}
	}
	r.finished.Add(1)
}

// series samples the engine's queue and token counters until done, and
// reports progress.
func (r *runner) series(done <-chan struct{}, out chan<- []SeriesPoint) {
	period := r.opt.SeriesPeriod
	if period <= 0 {
		period = 250 * time.Millisecond
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	var pts []SeriesPoint
	for {
		est := r.e.Stats()
		st := est.Scheduler
		p := SeriesPoint{At: time.Now(), Running: st.Running, DecodeTokens: st.DecodeTokens, Resources: r.resources(est)}
		for _, q := range st.Queued {
			p.Queued += q
		}
		if len(pts) >= maxSeries {
			kept := pts[:0]
			for i := 0; i < len(pts); i += 2 {
				kept = append(kept, pts[i])
			}
			pts = kept
		}
		pts = append(pts, p)
		if r.opt.Progress != nil {
			stage, _ := r.stage.Load().(string)
			r.opt.Progress(Progress{Stage: stage, Elapsed: p.At.Sub(r.start), Total: r.plannedDur,
				Sent: r.sent.Load(), Finished: r.finished.Load(), Queued: p.Queued, Running: p.Running})
		}
		select {
		case <-done:
			out <- pts
			return
		case <-tick.C:
		}
	}
}

func sleepUntil(ctx context.Context, at time.Time) error {
	return clock.Sleep(ctx, time.Until(at))
}

// settle waits until every request sent so far has reported its record
// (or a few seconds: a request that never reached the scheduler has
// none): the engine tells observers shortly after a request ends, on its
// own goroutine.
func (r *runner) settle() {
	r.col.wait(int(r.sent.Load()), 5*time.Second)
}
