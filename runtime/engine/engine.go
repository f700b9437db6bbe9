package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// Engine is the models open on this device, one scheduler sharing the
// device between every request to them, and the observers told of each
// request that finished.
//
// An Engine is safe for concurrent use by any number of goroutines.
type Engine struct {
	cfg  Config
	log  *slog.Logger
	s    *sched.Scheduler[tensors]
	x    *sched.Router[tensors]
	life context.Context // the engine's lifetime: cancelled by Close
	stop context.CancelFunc

	plugins   pluginState    // plugin models' records awaiting post (plugins.go)
	res       residencyState // loads, unloads and the reaper's wake-up (resident.go)
	bg        sync.WaitGroup // the record pump, the reaper and models being retired
	closeOnce sync.Once
	closeErr  error

	mu struct {
		sync.RWMutex
		closed    bool
		models    map[string]*model // by public name: the active version
		observers []*observerEntry
		loads     uint64 // numbers each load, for the scheduler's model keys
		// used is the bytes the versions loaded, loading or not yet freed
		// count against the memory budget; known the models of
		// Config.Models by name, loadable again once unloaded; loading
		// the on-demand loads under way (resident.go).
		used    int64
		known   map[string]ModelSpec
		loading map[string]*loading
		// learned is the most each model was measured to take (need).
		learned map[string]int64
	}
}

// tensors is the one-shot payload the scheduler batches: Inputs on the way
// in, Outputs on the way out.
type tensors = map[string]*ort.Tensor

// Open starts the scheduler and loads every model of cfg. Nothing in Open or
// later touches the network.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{cfg: cfg, log: log, x: sched.NewRouter[tensors]()}
	e.mu.models, e.mu.known, e.mu.loading, e.mu.learned = map[string]*model{}, map[string]ModelSpec{}, map[string]*loading{}, map[string]int64{}
	e.res.wake, e.res.room, e.res.loadSem = make(chan struct{}, 1), make(chan struct{}), make(chan struct{}, 1)
	for _, o := range cfg.Observers {
		e.mu.observers = append(e.mu.observers, &observerEntry{o: o})
	}
	s, err := sched.New[tensors](e.x, e.x, sched.Config(cfg.Scheduler), log)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	e.s = s
	e.life, e.stop = context.WithCancel(context.Background())
	e.holdRuntime() // resident.go
	e.bg.Go(e.pumpRecords)
	e.bg.Go(e.reap)
	if err := e.openModels(ctx); err != nil {
		return nil, errors.Join(err, e.Close(ctx))
	}
	return e, nil
}

// openModels loads Config.Models. Without a budget each is loaded and
// stays. Under one each is known by name (a request loads it again once
// unloaded) and loaded, in order, while it fits beside the ones before
// it; they are unloaded when idle like models loaded on demand.
func (e *Engine) openModels(ctx context.Context) error {
	if e.cfg.MemoryBudgetBytes == 0 {
		for _, spec := range e.cfg.Models {
			if _, err := e.Load(ctx, spec); err != nil {
				return err
			}
		}
		return nil
	}
	for _, spec := range e.cfg.Models {
		d, err := e.describe(ctx, spec)
		if err != nil {
			return err
		}
		e.mu.Lock()
		_, dup := e.mu.known[d.name]
		e.mu.known[d.name] = spec
		e.mu.Unlock()
		if dup {
			return fmt.Errorf("%w: model %q is configured twice", ErrConfig, d.name)
		}
		_, err = e.load(ctx, spec, false, false) // unload nothing at start
		switch {
		case errors.Is(err, errNoRoom):
			e.log.Info("model not loaded at start: no room in the memory budget", "name", d.name, "bytes", d.bytes)
		case err != nil:
			return err
		}
	}
	return nil
}

// Close drains running requests until ctx ends, then cancels the rest,
// joins the scheduler, tells the observers of the last records and frees
// every model. It is idempotent; later calls return the first result. Every
// call made after Close returns an error wrapping ErrClosed.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.mu.closed = true
		models := e.mu.models
		e.mu.models = map[string]*model{}
		e.mu.Unlock()
		e.roomChanged() // loads waiting for room give up
		err := e.s.Close(ctx)
		for _, m := range models {
			e.retire(m)
		}
		e.stop()
		e.bg.Wait()
		var errs []error
		for _, m := range models {
			errs = append(errs, m.closeErr)
		}
		e.closeErr = errors.Join(append(errs, err, e.releaseRuntime())...)
	})
	return e.closeErr
}

// model looks up the active version of a model by its public name.
func (e *Engine) model(name string) (*model, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.modelLocked(name)
}

func (e *Engine) modelLocked(name string) (*model, error) {
	if e.mu.closed {
		return nil, ErrClosed
	}
	m := e.mu.models[name]
	if m == nil {
		return nil, fmt.Errorf("%w: %q (open: %v)", ErrUnknownModel, name, e.namesLocked())
	}
	return m, nil
}

func (e *Engine) namesLocked() []string {
	names := make([]string, 0, len(e.mu.models))
	for n := range e.mu.models {
		names = append(names, n)
	}
	return names
}

// Models describes the open models (for reports' version matrix).
func (e *Engine) Models() []ModelInfo {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]ModelInfo, 0, len(e.mu.models))
	for _, m := range e.mu.models {
		out = append(out, m.info)
	}
	return out
}

// Stats is a snapshot of the scheduler's counters and each decoder's KV
// cache and decode phases. It is cheap and safe to call from any goroutine.
func (e *Engine) Stats() Stats {
	st := Stats{Scheduler: SchedStats(e.s.Stats()), KV: map[string]KVStats{}, Decode: map[string]DecodePhases{}, Residency: e.residencyStats()}
	e.mu.RLock()
	defer e.mu.RUnlock()
	for name, m := range e.mu.models {
		if m.dec != nil {
			st.KV[name] = KVStats(m.dec.Cache().Stats())
			st.Decode[name] = decodePhases(m.dec.Phases())
		}
	}
	return st
}

// SchedulerChanged returns a channel closed at the next change of the
// scheduler's running or queued requests (Stats().Scheduler): to wait for
// a state instead of polling Stats.
func (e *Engine) SchedulerChanged() <-chan struct{} { return e.s.Changed() }

// Scheduler is the scheduler's effective configuration (defaults filled in).
func (e *Engine) Scheduler() SchedulerConfig { return SchedulerConfig(e.s.Config()) }

// memory is a decoder's gauges in the metrics vocabulary.
func (m *model) memory() metrics.Memory {
	st := m.dec.Cache().Stats()
	return metrics.Memory{
		WeightBytes:     m.info.WeightBytes,
		KVBytesPerToken: st.BlockBytes / int64(max(st.BlockSize, 1)),
		KVCapacityBytes: st.BytesTotal,
		KVUsedBytes:     st.BytesUsed,
		KVPeakBytes:     int64(st.PeakBlocksUsed) * st.BlockBytes,
		KVWasteBytes:    (st.SlotsAllocated - st.SlotsFilled) * st.BlockBytes / int64(max(st.BlockSize, 1)),
		KVBlocksUsed:    st.BlocksUsed,
		KVBlocksTotal:   st.BlocksTotal,
	}
}
