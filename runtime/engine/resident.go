package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// Residency: which models are in memory. A request naming a model that is
// not loaded but that the engine knows (one of Config.Models, or one of
// the store's) loads it; a model stays while requests use it and for a
// keep-alive after the last one; under Config.MemoryBudgetBytes a load
// that needs room unloads idle models first, least recently used, and
// waits for busy ones to go idle rather than unload a model under a
// request. The reaper goroutine unloads models whose keep-alive ran out.

// DefaultKeepAlive is Config.KeepAlive's zero value: Ollama's default.
const DefaultKeepAlive = 5 * time.Minute

// ErrOverBudget reports a model that does not fit the memory budget even
// with every other unloadable model unloaded; the error is a *BudgetError.
var ErrOverBudget = errors.New("engine: model does not fit the memory budget")

// BudgetError is a load refused by the memory budget: the model's
// footprint (Bytes: its bundle's files and its KV budget) is over the
// budget less what models that are never unloaded hold (Held: those loaded
// with Load).
type BudgetError struct {
	Model         string
	Bytes, Budget int64
	Held          int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("engine: model %s needs %s (bundle files and KV budget), over the memory budget of %s (%s of it held by models loaded for good)",
		e.Model, mib(e.Bytes), mib(e.Budget), mib(e.Held))
}

// Unwrap makes errors.Is(err, ErrOverBudget) hold.
func (e *BudgetError) Unwrap() error { return ErrOverBudget }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// errNoRoom is reserve's answer when it may not unload anything (Open's
// preload under a budget).
var errNoRoom = errors.New("engine: no room in the memory budget")

// residency is a loaded version's place in the budget.
type residency struct {
	// bytes is what it counts against the budget until it is freed.
	bytes int64
	// pinned versions (Load; Open without a budget) are never unloaded
	// for room or for idleness.
	pinned bool
	// onDemand versions were loaded for a request: the first request to
	// run on one reports the load time.
	onDemand bool
	// rss is the process's resident set growth across the load, estimate
	// the manifest's count (footprint); bytes is the larger.
	rss, estimate int64
	freed         chan struct{} // closed once closed and its bytes released
}

// residencyState is the engine's side: the bytes counted, the loads under
// way, the models it knows how to load, and the counters of Stats.
type residencyState struct {
	wake chan struct{} // pokes the reaper (capacity 1)
	// loadSem lets one load at a time run under a budget (capacity 1); a
	// request waiting for its turn gives up with its context.
	loadSem chan struct{}
	// ortHeld: the engine holds ONNX Runtime's environment (holdRuntime).
	ortHeld bool

	roomMu sync.Mutex
	room   chan struct{} // closed and replaced when a model goes idle or is freed

	loads, unloads, evictions, expiries atomic.Uint64
	loadNanos                           atomic.Int64

	// skew is added to a load's measured growth (tests: a load that
	// measures more than it reserved).
	skew func(name string) int64
}

// loading is one on-demand load that concurrent requests for the same
// model wait on, so it runs once.
type loading struct {
	done chan struct{}
	err  error
}

// ResidencyStats are the loads and unloads since Open and the budget.
type ResidencyStats struct {
	BudgetBytes int64 // Config.MemoryBudgetBytes; 0: none
	// UsedBytes is what the loaded models (loads under way and versions
	// not yet freed included) count against it.
	UsedBytes int64
	// Loads counts versions loaded (at Open, by Load and Swap, on
	// demand); LoadTime is their total time.
	Loads    uint64
	LoadTime time.Duration
	// Unloads counts versions freed; Evictions those unloaded to make
	// room for a load, Expiries those whose keep-alive ran out.
	Unloads, Evictions, Expiries uint64
}

func (e *Engine) residencyStats() ResidencyStats {
	e.mu.RLock()
	used := e.mu.used
	e.mu.RUnlock()
	r := &e.res
	return ResidencyStats{BudgetBytes: e.cfg.MemoryBudgetBytes, UsedBytes: used, Loads: r.loads.Load(),
		LoadTime: time.Duration(r.loadNanos.Load()), Unloads: r.unloads.Load(), Evictions: r.evictions.Load(), Expiries: r.expiries.Load()}
}

// holdRuntime keeps ONNX Runtime's environment (the library and its
// global state: about 30 MiB resident on x86-64) loaded for the engine's
// life under a budget. Sessions hold it too, and the last one to close
// unloads it: without the engine's hold, the model loaded first into an
// empty engine would be measured with the runtime's base in its
// footprint, and every load after all models went idle would load the
// library again. The base is then the process's, outside the budget
// (TestBudgetRSS measures it apart). A library that cannot load is left
// to the sessions to report.
func (e *Engine) holdRuntime() {
	if e.cfg.MemoryBudgetBytes == 0 {
		return
	}
	if err := ort.Acquire(e.cfg.Session.LibraryPath); err != nil {
		e.log.Warn("engine: ONNX Runtime not loaded", "err", err)
		return
	}
	e.res.ortHeld = true
}

func (e *Engine) releaseRuntime() error {
	if !e.res.ortHeld {
		return nil
	}
	return ort.Release()
}

// keepAlive is the engine-wide keep-alive.
func (e *Engine) keepAlive() time.Duration { return cmp.Or(e.cfg.KeepAlive, DefaultKeepAlive) }

// roomChanged wakes loads waiting for room and the reaper: a model went
// idle or was freed.
func (e *Engine) roomChanged() {
	e.res.roomMu.Lock()
	close(e.res.room)
	e.res.room = make(chan struct{})
	e.res.roomMu.Unlock()
	select {
	case e.res.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) roomSignal() <-chan struct{} {
	e.res.roomMu.Lock()
	defer e.res.roomMu.Unlock()
	return e.res.room
}

// footprint is what a bundle counts against the budget: every file it
// holds (weights, tokenizer, plugins: all read into memory in some form)
// and, for a decoder, its KV budget, which its pools may grow to. ONNX
// Runtime's own buffers and the decoders' step buffers are not counted:
// TestBudgetRSS measures the process's resident set against the budget.
func (e *Engine) footprint(m *bundle.Manifest) int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	if m.Kind == bundle.KindDecoder {
		n += cmp.Or(e.cfg.KV.BudgetBytes, 256<<20) // llm's default KV budget
	}
	return n
}

// need is what a load of name reserves: the manifest's estimate, or what
// name was measured to hold when loaded before, whichever is larger. A
// first load can take a few MiB more than its estimate (ONNX Runtime's
// and the decoder's own buffers); the version is counted at its measure
// as soon as it is loaded, and TestBudgetRSS bounds the resident set
// against the budget.
func (e *Engine) need(name string, estimate int64) int64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return max(estimate, e.mu.learned[name])
}

// learn keeps the largest resident set a model was measured to take: its
// growth across a load, or its drop when freed (which includes the
// activations its requests added). Concurrent work blurs a measure, so
// the largest is kept.
func (e *Engine) learn(name string, measured int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.learned[name] = max(e.mu.learned[name], measured)
}

// onnxFootprint is a plain .onnx file's: it and its external data.
func onnxFootprint(path string) int64 {
	var n int64
	for _, p := range []string{path, path + ".data"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// described is what the engine knows of a model before loading it.
type described struct {
	name, kind, version string
	bytes               int64
}

// describe reads a spec's manifest (not its weights) for its name, kind
// and footprint.
func (e *Engine) describe(ctx context.Context, spec ModelSpec) (described, error) {
	if fi, err := os.Stat(spec.Dir); spec.Ref == "" && err == nil && !fi.IsDir() && strings.HasSuffix(spec.Dir, ".onnx") {
		return described{name: cmp.Or(spec.Name, strings.TrimSuffix(filepath.Base(spec.Dir), ".onnx")),
			kind: string(bundle.KindOneShot), bytes: onnxFootprint(spec.Dir)}, nil
	}
	if spec.Ref != "" {
		var d described
		err := e.withStore(ctx, func(st *store.Store) (err error) {
			d, err = e.describeStored(ctx, st, spec.Name, spec.Ref)
			return err
		})
		return d, err
	}
	raw, err := os.ReadFile(filepath.Join(spec.Dir, "edgeinfer.json"))
	if err != nil {
		return described{}, fmt.Errorf("engine: open %s: %w", spec.Dir, err)
	}
	return e.describeManifest(spec.Name, spec.Dir, raw)
}

// describeStored is describe for a model of the store st.
func (e *Engine) describeStored(ctx context.Context, st *store.Store, name, ref string) (described, error) {
	v, err := st.Resolve(ctx, ref)
	if err != nil {
		return described{}, fmt.Errorf("engine: open %s: %w", ref, err)
	}
	return e.describeManifest(name, ref, v.Manifest)
}

func (e *Engine) describeManifest(name, what string, raw []byte) (described, error) {
	m, err := bundle.ParseManifest(raw)
	if err != nil {
		return described{}, fmt.Errorf("engine: open %s: %w", what, err)
	}
	return described{name: cmp.Or(name, m.Name), kind: string(m.Kind), version: m.Version, bytes: e.footprint(m)}, nil
}

// withStore runs f on the model store: the one the caller holds, or
// Config.Store opened for the call.
func (e *Engine) withStore(ctx context.Context, f func(*store.Store) error) error {
	if e.cfg.HeldStore != nil {
		return f(e.cfg.HeldStore)
	}
	if e.cfg.Store == "" {
		return fmt.Errorf("%w: no model store", ErrUnknownModel)
	}
	st, err := store.Open(ctx, e.cfg.Store, store.Options{MustExist: true})
	if err != nil {
		return err
	}
	defer st.Close()
	return f(st)
}

// reserve counts need bytes for a load of name against the budget. When
// they do not fit and evict is set, it unloads idle models, least
// recently used first, and waits until they are freed; when the idle ones
// are not enough, it waits for busy ones to go idle (or ctx to end). A
// model that cannot fit whatever is unloaded gets a *BudgetError at once.
func (e *Engine) reserve(ctx context.Context, name string, need int64, evict bool) error {
	budget := e.cfg.MemoryBudgetBytes
	for {
		room := e.roomSignal()
		e.mu.Lock()
		if e.mu.closed {
			e.mu.Unlock()
			return ErrClosed
		}
		if budget == 0 || e.mu.used+need <= budget {
			e.mu.used += need
			e.mu.Unlock()
			return nil
		}
		var held int64
		for _, m := range e.mu.models {
			if m.res.pinned {
				held += m.res.bytes
			}
		}
		if need > budget-held {
			e.mu.Unlock()
			return &BudgetError{Model: name, Bytes: need, Budget: budget, Held: held}
		}
		if !evict {
			e.mu.Unlock()
			return errNoRoom
		}
		victims := e.idleLocked(e.mu.used+need-budget, strings.TrimSuffix(name, "@staged"))
		for _, v := range victims {
			delete(e.mu.models, v.name)
		}
		e.mu.Unlock()
		if err := e.evict(ctx, victims, name); err != nil {
			return err
		}
		if len(victims) > 0 {
			continue
		}
		select {
		case <-room:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

type named struct {
	name string
	m    *model
}

// idleLocked picks the idle, unpinned models to unload, least recently
// used first, whose bytes cover excess; none when all the idle ones
// together do not (unloading them would not make the room). spare is the
// model being loaded: a swap does not unload the version it replaces.
func (e *Engine) idleLocked(excess int64, spare string) []named {
	var idle []named
	for name, m := range e.mu.models {
		if !m.res.pinned && name != spare && !strings.HasSuffix(name, "@staged") && m.idle() {
			idle = append(idle, named{name, m})
		}
	}
	slices.SortFunc(idle, func(a, b named) int { return a.m.lastUsed().Compare(b.m.lastUsed()) })
	var freed int64
	for i, v := range idle {
		freed += v.m.res.bytes
		if freed >= excess {
			return idle[:i+1]
		}
	}
	return nil
}

// evict unloads victims (taken out of e.mu.models by the caller) to make
// room for a load of name, and waits until they are freed.
func (e *Engine) evict(ctx context.Context, victims []named, name string) error {
	for _, v := range victims {
		e.res.evictions.Add(1)
		e.log.Info("model unloaded", "name", v.name, "reason", "room", "for", name, "bytes", v.m.res.bytes)
		e.retire(v.m)
	}
	for _, v := range victims {
		select {
		case <-v.m.res.freed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// release gives back bytes reserved or held by a version now freed.
func (e *Engine) release(bytes int64) {
	e.mu.Lock()
	e.mu.used -= bytes
	e.mu.Unlock()
	e.roomChanged()
}

// reap unloads models whose keep-alive ran out, until the engine closes.
// It sleeps until the next expiry, or until a model goes idle.
func (e *Engine) reap() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		if next := e.expire(time.Now()); !next.IsZero() {
			t.Reset(time.Until(next))
		}
		select {
		case <-t.C:
		case <-e.res.wake:
			t.Stop()
		case <-e.life.Done():
			t.Stop()
			return
		}
	}
}

// expire unloads the idle, unpinned models whose keep-alive ended by now
// and returns when the next one ends (zero: none will).
func (e *Engine) expire(now time.Time) time.Time {
	var next time.Time
	var gone []named
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return next
	}
	for name, m := range e.mu.models {
		at, ok := m.expiry()
		switch {
		case m.res.pinned || strings.HasSuffix(name, "@staged") || !ok:
		case !at.After(now):
			delete(e.mu.models, name)
			gone = append(gone, named{name, m})
		case next.IsZero() || at.Before(next):
			next = at
		}
	}
	e.mu.Unlock()
	for _, v := range gone {
		e.res.expiries.Add(1)
		e.log.Info("model unloaded", "name", v.name, "reason", "keep-alive", "idle", now.Sub(v.m.lastUsed()))
		e.retire(v.m)
	}
	return next
}

// acquire looks up the active version of a model and counts a request on
// it, atomically with respect to Swap, Unload and the unloads of the
// budget (which retire a version only after taking it out of the map), so
// a version is never freed under a request that found it. A model not
// loaded that the engine knows is loaded first. keep, when set, is the
// model's keep-alive after this request.
func (e *Engine) acquire(ctx context.Context, name string, keep *time.Duration) (*model, error) {
	for {
		e.mu.RLock()
		m, err := e.modelLocked(name)
		if err == nil {
			m.begin(keep)
		}
		e.mu.RUnlock()
		if err == nil || !errors.Is(err, ErrUnknownModel) {
			return m, err
		}
		spec, ok := e.loadable(name)
		if !ok {
			return nil, err
		}
		if m, err = e.demand(ctx, name, spec, keep); m != nil || err != nil {
			return m, err
		}
		// loaded by another request: found in the map on the next turn
	}
}

// loadable is how name would be loaded: a model of Config.Models under a
// budget (unloaded since), or a model of the store.
func (e *Engine) loadable(name string) (ModelSpec, bool) {
	e.mu.RLock()
	spec, ok := e.mu.known[name]
	e.mu.RUnlock()
	if ok {
		return spec, true
	}
	if !e.cfg.hasStore() || strings.HasSuffix(name, "@staged") {
		return ModelSpec{}, false
	}
	if _, err := store.ParseRef(name); err != nil {
		return ModelSpec{}, false
	}
	return ModelSpec{Name: name, Ref: name}, true
}

// demand loads name once however many requests ask for it together. The
// request that runs the load gets the new version with itself counted on
// it (so no other load unloads it before it served); the others get nil
// and look it up again.
func (e *Engine) demand(ctx context.Context, name string, spec ModelSpec, keep *time.Duration) (*model, error) {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	if e.mu.models[name] != nil {
		e.mu.Unlock()
		return nil, nil
	}
	l := e.mu.loading[name]
	if l != nil {
		e.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		if l.err != nil && !errors.Is(l.err, context.Canceled) && !errors.Is(l.err, context.DeadlineExceeded) {
			return nil, l.err
		}
		return nil, nil // loaded, or its requester gave up: try again
	}
	l = &loading{done: make(chan struct{})}
	e.mu.loading[name] = l
	e.bg.Add(1) // Close waits for the load (and the retire of a late one)
	e.mu.Unlock()
	defer e.bg.Done()

	m, err := e.open(ctx, spec, "", false, true)
	if err == nil {
		m.res.onDemand = true
		m.begin(keep)
		e.route(m)
		e.mu.Lock()
		switch {
		case e.mu.closed:
			err = ErrClosed
		case e.mu.models[name] != nil: // loaded by Load meanwhile
			err = fmt.Errorf("%w: model %q is already open", ErrConfig, name)
		default:
			e.mu.models[name] = m
		}
		e.mu.Unlock()
		if err != nil {
			m.end()
			e.retire(m)
			if !errors.Is(err, ErrClosed) {
				err = nil // use the other
			}
			m = nil
		} else {
			e.logLoaded(m, "on demand")
		}
	} else if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrNoStore) || errors.Is(err, store.ErrBadRef) {
		err = fmt.Errorf("%w: %q: %w", ErrUnknownModel, name, err)
	}
	e.mu.Lock()
	delete(e.mu.loading, name)
	e.mu.Unlock()
	l.err = err
	close(l.done)
	return m, err
}

func (e *Engine) logLoaded(m *model, why string) {
	e.log.Info("model loaded", "name", m.name, "version", m.info.Version, "kind", m.info.Kind, "provider", m.info.Provider,
		"load", m.info.LoadTime, "why", why, "bytes", m.res.bytes, "rss_delta", m.res.rss)
}

// Hold makes a model resident, loading it if it is not, and keeps it
// loaded until release is called: for a caller that needs the model's
// ModelInfo before its request (the HTTP API checks the kind and the
// tokenizer). keep, when set, is the model's keep-alive after its last
// request. loadTime is the load this call waited for (zero when the
// model was loaded already).
func (e *Engine) Hold(ctx context.Context, name string, keep *time.Duration) (info ModelInfo, loadTime time.Duration, release func(), err error) {
	m, err := e.acquire(ctx, name, keep)
	if err != nil {
		return ModelInfo{}, 0, nil, err
	}
	return m.info, m.peekLoad(), m.end, nil
}

// Available is one model the engine can serve: loaded, or loadable on
// demand (one of Config.Models, or one of the store's active versions).
type Available struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Kind    string `json:"kind"`
	// Bytes is what it counts against the memory budget.
	Bytes  int64 `json:"bytes"`
	Loaded bool  `json:"loaded"`
	// Info is the loaded version's; nil when not loaded.
	Info *ModelInfo `json:"info,omitempty"`
	// Expires is when its keep-alive ends if no request comes (zero:
	// loaded for good, busy, or not loaded).
	Expires time.Time `json:"expires,omitzero"`
}

// Available lists the models loaded and those that a request would load,
// by name. A store that cannot be read leaves its models out and returns
// the error with the rest.
func (e *Engine) Available(ctx context.Context) ([]Available, error) {
	out := map[string]Available{}
	e.mu.RLock()
	for name, m := range e.mu.models {
		if strings.HasSuffix(name, "@staged") {
			continue
		}
		info := m.info
		a := Available{Name: name, Version: info.Version, Kind: info.Kind, Bytes: m.res.bytes, Loaded: true, Info: &info}
		if at, ok := m.expiry(); ok && !m.res.pinned {
			a.Expires = at
		}
		out[name] = a
	}
	known := make(map[string]ModelSpec, len(e.mu.known))
	for n, s := range e.mu.known {
		if out[n].Name == "" {
			known[n] = s
		}
	}
	e.mu.RUnlock()
	var errs []error
	for n, s := range known {
		d, err := e.describe(ctx, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[n] = Available{Name: n, Version: d.version, Kind: d.kind, Bytes: e.need(n, d.bytes)}
	}
	if e.cfg.hasStore() {
		errs = append(errs, e.withStore(ctx, func(st *store.Store) error {
			for ent, err := range st.List(ctx) {
				if err != nil {
					return err
				}
				if !ent.Active || ent.Err != nil || out[ent.Ref.Name].Name != "" {
					continue
				}
				d, err := e.describeStored(ctx, st, "", ent.Ref.String())
				if err != nil {
					errs = append(errs, err)
					continue
				}
				out[ent.Ref.Name] = Available{Name: ent.Ref.Name, Version: d.version, Kind: d.kind, Bytes: e.need(ent.Ref.Name, d.bytes)}
			}
			return nil
		}))
	}
	list := make([]Available, 0, len(out))
	for _, a := range out {
		list = append(list, a)
	}
	slices.SortFunc(list, func(a, b Available) int { return strings.Compare(a.Name, b.Name) })
	return list, errors.Join(errs...)
}

// selfRSS is this process's resident set in bytes (Linux; 0 elsewhere).
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res int64
	if _, err := fmt.Sscan(string(b), &size, &res); err != nil {
		return 0
	}
	return res * int64(os.Getpagesize())
}
