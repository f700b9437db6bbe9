package ort

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	onnx "github.com/yalue/onnxruntime_go"
	"golang.org/x/sys/unix"
)

// Session is a loaded model bound to one execution provider.
//
// A Session is safe for concurrent use: ONNX Runtime allows concurrent Run
// calls on one session, and each call here has its own run options, so
// cancelling one run does not disturb the others. Close terminates the runs
// in flight, waits for ONNX Runtime to return from each, and only then frees
// the session: nothing is freed under a live native call. Calls after Close
// return ErrClosed.
type Session struct {
	native   *onnx.DynamicAdvancedSession
	info     ModelInfo
	inIndex  map[string]int
	outIndex map[string]int
	provider Provider
	attempts []ProviderAttempt
	loadTime time.Duration
	huge     int64 // bytes of the session's memory collapsed into huge pages
	log      *slog.Logger

	runs    sync.WaitGroup // runs in flight; Add only under mu while open
	onBegin func()         // nil, or called (under mu) once a run is registered: for tests to wait on
	mu      struct {
		sync.Mutex
		closed bool
		active map[*runState]struct{}
		free   []*runState
	}
}

// runState is one run's options, reused across runs. terminate is made
// once so a cancellable run does not allocate a closure.
type runState struct {
	ro         *onnx.RunOptions
	terminated bool // Terminate was called; guarded by Session.mu
	byClose    bool
	terminate  func()
}

// NewSession loads a model from its serialised bytes, trying the execution
// providers of opts in order (see Options.Providers). ctx is checked between
// provider attempts; a single native load cannot be interrupted. Models with
// external weight files must be loaded with NewSessionFromFile, so their
// relative paths resolve.
func NewSession(ctx context.Context, model []byte, opts Options) (*Session, error) {
	if len(model) == 0 {
		return nil, fmt.Errorf("%w: empty model", ErrInvalidModel)
	}
	info, err := ReadModelInfo(model)
	if err != nil {
		return nil, err
	}
	return newSession(ctx, info, opts, func(in, out []string, so *onnx.SessionOptions) (*onnx.DynamicAdvancedSession, error) {
		return onnx.NewDynamicAdvancedSessionWithONNXData(model, in, out, so)
	})
}

// NewSessionFromFile loads the model at path (external data files beside it
// are found by ONNX Runtime). See NewSession.
func NewSessionFromFile(ctx context.Context, path string, opts Options) (*Session, error) {
	info, err := inspectFile(path)
	if err != nil {
		return nil, err
	}
	return newSession(ctx, info, opts, func(in, out []string, so *onnx.SessionOptions) (*onnx.DynamicAdvancedSession, error) {
		return onnx.NewDynamicAdvancedSession(path, in, out, so)
	})
}

// inspectFile maps the model read-only to read its header without copying
// gigabytes of embedded weights onto the heap.
func inspectFile(path string) (ModelInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("ort: open model: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ModelInfo{}, fmt.Errorf("ort: open model: %w", err)
	}
	if st.IsDir() || st.Size() == 0 {
		return ModelInfo{}, fmt.Errorf("%w: %s is empty or a directory", ErrInvalidModel, path)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("ort: map model: %w", err)
	}
	defer unix.Munmap(data)
	info, err := ReadModelInfo(data)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

type createFunc func(in, out []string, so *onnx.SessionOptions) (*onnx.DynamicAdvancedSession, error)

func newSession(ctx context.Context, info ModelInfo, opts Options, create createFunc) (*Session, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := Acquire(opts.LibraryPath); err != nil {
		return nil, err
	}
	s := &Session{
		info:     info,
		inIndex:  map[string]int{},
		outIndex: map[string]int{},
		log:      slog.New(slog.DiscardHandler),
	}
	s.mu.active = map[*runState]struct{}{}
	inNames := make([]string, len(info.Inputs))
	for i, v := range info.Inputs {
		inNames[i] = v.Name
		s.inIndex[v.Name] = i
	}
	outNames := make([]string, len(info.Outputs))
	for i, v := range info.Outputs {
		outNames[i] = v.Name
		s.outIndex[v.Name] = i
	}
	if len(inNames) == 0 || len(outNames) == 0 {
		// The Go binding passes &inputs[0] to ONNX Runtime.
		return nil, errors.Join(fmt.Errorf("%w: models without graph inputs or outputs cannot be run through onnxruntime_go", ErrInvalidModel), Release())
	}
	if err := customOpsFor(info); err != nil {
		return nil, errors.Join(err, Release())
	}
	pinMmapThreshold()
	start := time.Now()
	var before residentSet
	if !opts.DisableHugePages {
		before = anonResident()
	}
	if err := s.chooseProvider(ctx, opts, inNames, outNames, create); err != nil {
		return nil, errors.Join(err, Release())
	}
	s.huge = collapseNew(before)
	s.loadTime = time.Since(start)
	return s, nil
}

// chooseProvider walks the chain until a provider appends, creates the
// session and passes the probe.
func (s *Session) chooseProvider(ctx context.Context, opts Options, in, out []string, create createFunc) error {
	chain := opts.Providers
	if chain == nil {
		chain = DefaultProviders()
	}
	if !slices.ContainsFunc(chain, func(p ProviderConfig) bool { return p.Name.canonical() == CPU }) {
		chain = append(slices.Clone(chain), ProviderConfig{Name: CPU})
	}
	for _, p := range chain {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("ort: load: %w", err)
		}
		p.Name = p.Name.canonical()
		start := time.Now()
		sess, err := s.tryProvider(opts, p, in, out, create)
		a := ProviderAttempt{Provider: p.Name, Duration: time.Since(start), Err: err}
		if err == nil {
			a.Chosen = true
			s.attempts = append(s.attempts, a)
			s.native, s.provider = sess, p.Name
			return nil
		}
		if p.Name == CPU {
			// The CPU provider runs every standard operator: when it
			// fails, the model itself is at fault.
			return fmt.Errorf("%w: %w", ErrInvalidModel, err)
		}
		a.Reason = skipReason(p.Name, err)
		s.attempts = append(s.attempts, a)
		s.log.Debug("ort: provider skipped", "provider", p.Name, "reason", a.Reason)
	}
	return fmt.Errorf("%w: %v", ErrNoProvider, s.attempts)
}

func (s *Session) tryProvider(opts Options, p ProviderConfig, in, out []string, create createFunc) (*onnx.DynamicAdvancedSession, error) {
	so, err := sessionOptions(opts)
	if err != nil {
		return nil, err
	}
	defer so.Destroy()
	if err := appendProvider(so, p); err != nil {
		return nil, err
	}
	sess, err := createFirstAlone(create, in, out, so)
	if err != nil {
		return nil, err
	}
	if p.Name != CPU && !opts.NoProbe {
		if err := s.probe(sess, opts.ProbeDims); err != nil {
			return nil, errors.Join(fmt.Errorf("probe inference: %w", err), sess.Destroy())
		}
	}
	return sess, nil
}

// probe runs the model once on zeroed inputs, so a provider that accepts the
// graph but fails on it (a missing kernel, an out-of-memory device) is
// skipped now rather than failing the first real request. Models whose
// inputs have symbolic sizes not given in dims are not probed.
func (s *Session) probe(sess *onnx.DynamicAdvancedSession, dims map[string]int64) error {
	var tensors []*Tensor
	defer func() {
		for _, t := range tensors {
			_ = t.Close()
		}
	}()
	in := make([]onnx.Value, len(s.info.Inputs))
	for i, v := range s.info.Inputs {
		if v.Kind != "tensor" || v.Shape == nil || v.DType.Size() == 0 {
			return nil
		}
		shape := slices.Clone(v.Shape)
		for j, d := range shape {
			if d >= 0 {
				continue
			}
			if j >= len(v.DimNames) || dims[v.DimNames[j]] <= 0 {
				return nil
			}
			shape[j] = dims[v.DimNames[j]]
		}
		t, err := NewEmptyTensor(v.DType, shape)
		if err != nil {
			return err
		}
		tensors = append(tensors, t)
		in[i] = t.value
	}
	out := make([]onnx.Value, len(s.info.Outputs))
	if err := sess.Run(in, out); err != nil {
		return err
	}
	for _, v := range out {
		if v != nil {
			_ = v.Destroy()
		}
	}
	return nil
}

func sessionOptions(opts Options) (*onnx.SessionOptions, error) {
	so, err := onnx.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("ort: session options: %w", err)
	}
	err = func() error {
		if opts.IntraOpThreads > 0 {
			if err := so.SetIntraOpNumThreads(opts.IntraOpThreads); err != nil {
				return err
			}
		}
		if opts.InterOpThreads > 0 {
			if err := so.SetInterOpNumThreads(opts.InterOpThreads); err != nil {
				return err
			}
		}
		level := map[GraphOptimization]onnx.GraphOptimizationLevel{
			OptimizeAll:      onnx.GraphOptimizationLevelEnableAll,
			OptimizeDisabled: onnx.GraphOptimizationLevelDisableAll,
			OptimizeBasic:    onnx.GraphOptimizationLevelEnableBasic,
			OptimizeExtended: onnx.GraphOptimizationLevelEnableExtended,
		}[opts.GraphOptimization]
		if err := so.SetGraphOptimizationLevel(level); err != nil {
			return err
		}
		mode := onnx.ExecutionMode(onnx.ExecutionModeSequential)
		if opts.ExecutionMode == Parallel {
			mode = onnx.ExecutionMode(onnx.ExecutionModeParallel)
		}
		if err := so.SetExecutionMode(mode); err != nil {
			return err
		}
		if opts.OptimizedModelPath != "" {
			if err := so.SetOptimizedModelFilePath(opts.OptimizedModelPath); err != nil {
				return err
			}
		}
		if opts.ProfilePrefix != "" {
			if err := so.EnableProfiling(opts.ProfilePrefix); err != nil {
				return err
			}
		}
		if env.opsErr == nil { // else customOpsFor refused the graphs that need them
			if err := registerCustomOps(so); err != nil {
				return err
			}
		}
		for k, v := range opts.configEntries() {
			if err := so.AddSessionConfigEntry(k, v); err != nil {
				return fmt.Errorf("config entry %s=%s: %w", k, v, err)
			}
		}
		return nil
	}()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%w: %v", ErrInvalidOptions, err), so.Destroy())
	}
	return so, nil
}

// Provider is the execution provider the session runs on.
func (s *Session) Provider() Provider { return s.provider }

// ProviderAttempts lists every provider tried, in order, with the reason
// each skipped one was skipped; the last is the chosen one.
func (s *Session) ProviderAttempts() []ProviderAttempt { return slices.Clone(s.attempts) }

// LoadTime is how long choosing the provider and creating the session took.
func (s *Session) LoadTime() time.Duration { return s.loadTime }

// HugePageBytes is how much of the memory that became resident while the
// session was created (its weights, prepacked kernels) was collapsed into
// transparent huge pages; 0 with Options.DisableHugePages, on kernels without
// them, or off Linux.
func (s *Session) HugePageBytes() int64 { return s.huge }

// Info describes the model: inputs, outputs, opsets, metadata.
func (s *Session) Info() ModelInfo { return s.info }

// Inputs are the model's inputs in declaration order.
func (s *Session) Inputs() []ValueInfo { return slices.Clone(s.info.Inputs) }

// Outputs are the model's outputs in declaration order.
func (s *Session) Outputs() []ValueInfo { return slices.Clone(s.info.Outputs) }

// Close terminates runs in flight, waits for them to return, then frees the
// session and drops its environment reference. Idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	var errs []error
	for rs := range s.mu.active {
		if !rs.terminated {
			rs.terminated, rs.byClose = true, true
			errs = append(errs, rs.ro.Terminate())
		}
	}
	s.mu.Unlock()
	s.runs.Wait()
	s.mu.Lock()
	for _, rs := range s.mu.free {
		errs = append(errs, rs.ro.Destroy())
	}
	s.mu.free = nil
	s.mu.Unlock()
	errs = append(errs, s.native.Destroy(), Release())
	trimHeap()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ort: close session: %w", err)
	}
	return nil
}
