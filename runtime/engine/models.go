package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/internal/llm"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// model is one loaded version of a model: a decoder or a one-shot session.
type model struct {
	name string // public name
	key  string // the scheduler's name for this version: name#load
	info ModelInfo
	dec  *llm.Model
	one  *oneshot
	pl   *plugin.Pipeline // a one-shot bundle's pre/post plugins, or nil (plugins.go)
	tok  *tokenizer.Tokenizer
	chat *tokenizer.ChatTemplate // the bundle's chat template, or nil (Chat)
	gen  bundle.Generation
	cons constraints // the vocabulary index of constrained generation (constrain.go)
	emb  *embedModel // a one-shot embedding model's signature, or nil (embed.go)

	res    residency // its place in the memory budget (resident.go)
	onIdle func()    // the engine's, told when its last request ends

	// live counts the requests submitted to this version and not yet
	// finished (queued or running); a retired version is freed when it
	// reaches zero, so nothing queued on it is lost in a swap. lastUsed is
	// when it last had none, keep its keep-alive after that (negative:
	// for good), loadTaken whether a request reported its load.
	mu struct {
		sync.Mutex
		live      int
		retired   bool
		lastUsed  time.Time
		keep      time.Duration
		loadTaken bool
	}
	drained   chan struct{} // closed (once, by drain) when retired and no request is live
	drainOnce sync.Once
	closeErr  error
}

// Load opens a model while the engine runs and makes it available under
// spec.Name (or its manifest's name). Loading a name already open is an
// error: use Swap to replace a version.
func (e *Engine) Load(ctx context.Context, spec ModelSpec) (ModelInfo, error) {
	if err := spec.validate(e.cfg.hasStore()); err != nil {
		return ModelInfo{}, err
	}
	return e.load(ctx, spec, true, true)
}

// load is Load; a version not pinned may be unloaded when idle (Open's
// models under a budget).
func (e *Engine) load(ctx context.Context, spec ModelSpec, pinned, evict bool) (ModelInfo, error) {
	m, err := e.open(ctx, spec, "", pinned, evict)
	if err != nil {
		return ModelInfo{}, err
	}
	e.mu.Lock()
	switch {
	case e.mu.closed:
		err = ErrClosed
	case e.mu.models[m.name] != nil:
		err = fmt.Errorf("%w: model %q is already open (use Swap to replace it)", ErrConfig, m.name)
	default:
		e.mu.models[m.name] = m
	}
	e.mu.Unlock()
	if err != nil {
		return ModelInfo{}, errors.Join(err, e.discard(m))
	}
	e.route(m)
	e.logLoaded(m, map[bool]string{true: "load", false: "config"}[pinned])
	return m.info, nil
}

// Unload removes a model: new requests to it fail with ErrUnknownModel
// (a model of Config.Models under a budget is not loaded again on
// demand; one of the store's is), requests already running on it finish,
// and then its memory is freed; Unload returns then.
func (e *Engine) Unload(ctx context.Context, name string) error {
	e.mu.Lock()
	m := e.mu.models[name]
	closed := e.mu.closed
	delete(e.mu.models, name)
	delete(e.mu.known, name)
	e.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case m == nil:
		return fmt.Errorf("%w: %q", ErrUnknownModel, name)
	}
	e.retire(m)
	select {
	case <-m.res.freed: // drained, then closed
		return nil
	case <-ctx.Done():
		return context.Cause(ctx) // it is freed once its last request ends
	}
}

// HealthCheck judges a staged model version before it takes traffic. It
// runs requests against staged (a model name valid during the check, e.g.
// with e.Generate or e.Infer) and returns nil to accept it.
type HealthCheck func(ctx context.Context, e *Engine, staged string) error

// Swap replaces the active version of model name with the one spec names:
// the new version is loaded beside the old one under a staged name, check
// runs against it (nil: no check), and then the switch is atomic —
// requests already running finish on the old version, every later one goes
// to the new, and the old one is freed when its last request ends. A failed
// load or check leaves the old version active and returns an error wrapping
// ErrHealthCheck (for the check) with the reason.
func (e *Engine) Swap(ctx context.Context, name string, spec ModelSpec, check HealthCheck) (ModelInfo, error) {
	if err := spec.validate(e.cfg.hasStore()); err != nil {
		return ModelInfo{}, err
	}
	if _, err := e.model(name); err != nil {
		return ModelInfo{}, err
	}
	spec.Name = name
	staged := name + "@staged"
	m, err := e.open(ctx, spec, staged, true, true)
	if err != nil {
		return ModelInfo{}, err
	}
	e.mu.Lock()
	if e.mu.closed || e.mu.models[staged] != nil {
		e.mu.Unlock()
		return ModelInfo{}, errors.Join(fmt.Errorf("%w: a swap of %q is already under way", ErrConfig, name), e.discard(m))
	}
	e.mu.models[staged] = m
	e.mu.Unlock()
	e.route(m)

	if check != nil {
		err = check(ctx, e, staged)
	}
	e.mu.Lock()
	delete(e.mu.models, staged)
	old := e.mu.models[name]
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %s %s: %w", ErrHealthCheck, name, m.info.Version, err)
	case e.mu.closed:
		err = ErrClosed
	case old == nil:
		err = fmt.Errorf("%w: %q was unloaded during the swap", ErrUnknownModel, name)
	default:
		m.info.Name = name
		m.res.pinned = old.res.pinned // the new version stays as the old one would have
		e.mu.models[name] = m
	}
	e.mu.Unlock()
	if err != nil {
		m.skipPersist() // the failed version's file must not replace the active one's
		e.retire(m)
		<-m.drained
		return ModelInfo{}, err
	}
	old.skipPersist() // the new version's file replaces the old one's
	e.retire(old)
	e.log.Info("model swapped", "name", name, "from", old.info.Version, "to", m.info.Version)
	return m.info, nil
}

// open loads spec as a new version, within the memory budget (unloading
// idle models for room when evict is set; resident.go). as overrides the
// public name (a staged version answers to its staged name until the
// switch). A pinned version is never unloaded but by Unload and Swap.
func (e *Engine) open(ctx context.Context, spec ModelSpec, as string, pinned, evict bool) (*model, error) {
	var reserved int64
	if e.cfg.MemoryBudgetBytes > 0 {
		// One load at a time under a budget: each one's resident set
		// growth is then its own (the measure its footprint learns from).
		select {
		case e.res.loadSem <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("engine: waiting for another model's load: %w", context.Cause(ctx))
		}
		defer func() { <-e.res.loadSem }()
		d, err := e.describe(ctx, spec)
		if err != nil {
			return nil, err
		}
		reserved = e.need(d.name, d.bytes)
		if err := e.reserve(ctx, cmp.Or(as, d.name), reserved, evict); err != nil {
			return nil, err
		}
	}
	rss := selfRSS()
	m, err := e.openVersion(ctx, spec, as)
	if err != nil {
		e.release(reserved)
		return nil, err
	}
	m.res.rss = selfRSS() - rss
	if e.res.skew != nil {
		m.res.rss += e.res.skew(m.name)
	}
	m.res.estimate = m.res.bytes // the manifest's count (footprint)
	m.res.bytes = max(m.res.bytes, m.res.rss)
	e.learn(publicName(m.key), m.res.rss)
	m.res.pinned, m.res.freed, m.onIdle = pinned, make(chan struct{}), e.roomChanged
	m.mu.keep, m.mu.lastUsed = e.keepAlive(), m.info.Loaded
	e.mu.Lock()
	e.mu.used += m.res.bytes - reserved // the version's own count is the measure now
	var victims []named
	if over := e.mu.used - e.cfg.MemoryBudgetBytes; e.cfg.MemoryBudgetBytes > 0 && over > 0 && evict {
		// The load measured more than it reserved: idle models make the
		// room, so the budget holds once the load returns.
		victims = e.idleLocked(over, strings.TrimSuffix(m.name, "@staged"))
		for _, v := range victims {
			delete(e.mu.models, v.name)
		}
	}
	e.mu.Unlock()
	_ = e.evict(ctx, victims, m.name) // a caller gone: the victims are freed all the same
	e.res.loads.Add(1)
	e.res.loadNanos.Add(int64(m.info.LoadTime))
	m.info.ResidentBytes, m.info.LoadRSSBytes = m.res.bytes, m.res.rss
	return m, nil
}

// discard frees a version that never served (its load was refused a
// place) and gives its bytes back.
func (e *Engine) discard(m *model) error {
	err := m.close()
	e.release(m.res.bytes)
	return err
}

// openVersion loads spec's files into a version (sessions, tokenizer,
// plugins), with no regard for the budget.
func (e *Engine) openVersion(ctx context.Context, spec ModelSpec, as string) (*model, error) {
	start := time.Now()
	if fi, err := os.Stat(spec.Dir); spec.Ref == "" && err == nil && !fi.IsDir() && strings.HasSuffix(spec.Dir, ".onnx") {
		return e.openOnnx(ctx, spec, as, start)
	}
	var b *bundle.Bundle
	var err error
	switch {
	case spec.Ref != "" && e.cfg.HeldStore != nil:
		b, err = StoredBundle(ctx, e.cfg.HeldStore, spec.Ref)
	case spec.Ref != "":
		b, err = ModelBundle(ctx, e.cfg.Store, spec.Ref)
	default:
		b, err = bundle.Load(spec.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("engine: open %s%s: %w", spec.Dir, spec.Ref, err)
	}
	m := &model{name: cmp.Or(as, spec.Name, b.Manifest.Name), drained: make(chan struct{})}
	if g := b.Manifest.Generation; g != nil {
		m.gen = *g
	}
	m.info = infoOf(cmp.Or(spec.Name, b.Manifest.Name), b)
	m.res.bytes = e.footprint(&b.Manifest)
	if b.Manifest.Kind == bundle.KindDecoder {
		cfg := e.s.Config()
		// The step buffers hold the scheduler's largest step: its batch of
		// decode rows, or one prefill chunk (bounded by the chunk size and
		// the step's token budget, and never longer than the context).
		chunk := min(cfg.ChunkSize, cfg.TokenBudget)
		if g := b.Manifest.Geometry; g != nil && g.MaxPositions > 0 {
			chunk = min(chunk, g.MaxPositions)
		}
		m.dec, err = llm.Load(ctx, b, llm.Options{
			Session: e.cfg.Session, KV: e.cfg.KV.internal(),
			MaxBatch: cfg.MaxBatch, MaxChunk: chunk, Logger: e.log,
			Persist: e.cfg.persistOptions(m.info.Name, m.info.Version, m.info.Digest),
		})
		if err != nil {
			return nil, fmt.Errorf("engine: open %s: %w", m.name, err)
		}
		m.info.setSession(m.dec.Session())
		m.info.KV = kvInfoOf(m.dec.Cache().Config(), m.dec.Cache().Stats())
		if p := b.TokenizerPath(); p != "" {
			if m.tok, err = tokenizer.Load(p); err != nil {
				return nil, errors.Join(fmt.Errorf("engine: %s tokenizer: %w", m.name, err), m.close())
			}
		}
		if err := m.openChat(b); err != nil {
			return nil, errors.Join(err, m.close())
		}
		m.info.Context, m.info.Tokenizer = m.dec.Geometry().MaxPositions, m.tok != nil
		if m.dec.HasHiddenStates() {
			m.info.Embeddings = m.dec.HiddenSize()
		}
		if err := e.openDecoderPlugins(ctx, m, b); err != nil { // generate_plugins.go
			return nil, errors.Join(err, m.close())
		}
	} else {
		s, err := ort.NewSessionFromFile(ctx, b.ModelPath(), e.cfg.Session)
		if err != nil {
			return nil, fmt.Errorf("engine: open %s: %w", m.name, err)
		}
		m.one = newOneshot(m.name, s)
		if err := e.openPlugins(ctx, m, b); err != nil {
			return nil, errors.Join(err, m.close())
		}
		m.info.setSession(s)
		m.info.Inputs, m.info.Outputs = s.Inputs(), s.Outputs()
		if em, dims := oneshotEmbedding(s.Inputs(), s.Outputs()); em != nil && b.TokenizerPath() != "" && m.pl == nil {
			// a sentence-embedding export with its tokenizer (embed.go)
			if m.tok, err = tokenizer.Load(b.TokenizerPath()); err != nil {
				return nil, errors.Join(fmt.Errorf("engine: %s tokenizer: %w", m.name, err), m.close())
			}
			m.emb, m.info.Embeddings, m.info.Tokenizer = em, dims, true
		}
	}
	if m.pl != nil {
		m.info.Plugins = m.pl.Infos()
	}
	m.info.Loaded = time.Now()
	m.info.LoadTime = m.info.Loaded.Sub(start)
	m.key = e.keyFor(m.name)
	e.registerPlugins(m)
	return m, nil
}

// skipPersist keeps a retired decoder from saving its prefix cache over
// the file of the version that stays.
func (m *model) skipPersist() {
	if m.dec != nil {
		m.dec.SkipPersist()
	}
}

// openChat compiles a decoder bundle's chat template, once, and finds the
// text that ends its turns (Chat stops there).
func (m *model) openChat(b *bundle.Bundle) error {
	c := b.Manifest.Chat
	if c == nil {
		return nil
	}
	chat, err := tokenizer.NewChatTemplate(tokenizer.ChatTemplateConfig{Template: c.Template, BOSToken: c.BOSToken, EOSToken: c.EOSToken})
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrConfig, m.name, err)
	}
	var specials []string
	if m.tok != nil {
		specials = m.tok.SpecialTokens()
	}
	m.chat = chat
	m.info.ChatTemplate, m.info.TurnEnd = true, chat.TurnEnd(specials)
	m.info.ToolFormat = chat.ToolFormat()
	return nil
}

func (e *Engine) openOnnx(ctx context.Context, spec ModelSpec, as string, start time.Time) (*model, error) {
	name := cmp.Or(as, spec.Name, strings.TrimSuffix(filepath.Base(spec.Dir), ".onnx"))
	s, err := ort.NewSessionFromFile(ctx, spec.Dir, e.cfg.Session)
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", spec.Dir, err)
	}
	m := &model{name: name, drained: make(chan struct{}), one: newOneshot(name, s),
		info: ModelInfo{Name: cmp.Or(spec.Name, name), Kind: string(bundle.KindOneShot), Path: spec.Dir}}
	m.info.setSession(s)
	m.info.Inputs, m.info.Outputs = s.Inputs(), s.Outputs()
	m.info.Loaded = time.Now()
	m.info.LoadTime = m.info.Loaded.Sub(start)
	m.res.bytes = onnxFootprint(spec.Dir)
	m.key = e.keyFor(name)
	return m, nil
}

func (e *Engine) keyFor(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.loads++
	return name + "#" + strconv.FormatUint(e.mu.loads, 10)
}

// publicName is the model name a scheduler key stands for.
func publicName(key string) string {
	if i := strings.LastIndexByte(key, '#'); i >= 0 {
		key = key[:i]
	}
	return strings.TrimSuffix(key, "@staged")
}

// route registers m's executor with the scheduler's router: the device
// loop calls it directly, by m.key.
func (e *Engine) route(m *model) {
	var dec sched.Decoder // a nil *llm.Model is not a nil Decoder
	if m.dec != nil {
		dec = m.dec
	}
	var one sched.Runner[tensors]
	if m.one != nil {
		one = m.one
	}
	e.x.Add(m.key, dec, one)
}

// retire takes m out of service: it is freed, in the background, once no
// request is queued or running on it and no call is inside it.
func (e *Engine) retire(m *model) {
	m.mu.Lock()
	m.mu.retired = true
	idle := m.mu.live == 0
	m.mu.Unlock()
	if idle {
		m.drain()
	}
	e.bg.Go(func() {
		<-m.drained
		e.x.Remove(m.key) // returns once no step or batch is inside the model
		rss := selfRSS()
		m.closeErr = m.close()
		e.learn(publicName(m.key), rss-selfRSS()) // what it held, its activations included
		e.res.unloads.Add(1)
		e.release(m.res.bytes)
		close(m.res.freed)
	})
}

// begin counts a request on this version; the caller calls end when it
// leaves the scheduler. keep, when set, is the version's keep-alive after
// its last request (the latest request's word wins, as in Ollama).
func (m *model) begin(keep *time.Duration) {
	m.mu.Lock()
	m.mu.live++
	if keep != nil {
		m.mu.keep = *keep
	}
	m.mu.Unlock()
}

func (m *model) end() {
	m.mu.Lock()
	m.mu.live--
	idle := m.mu.live == 0
	drain := idle && m.mu.retired
	if idle {
		m.mu.lastUsed = time.Now()
	}
	m.mu.Unlock()
	if drain {
		m.drain()
	}
	if idle && m.onIdle != nil {
		m.onIdle() // a load may be waiting for room, and the keep-alive starts
	}
}

// idle reports that no request is queued or running on the version.
func (m *model) idle() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.live == 0
}

func (m *model) lastUsed() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.lastUsed
}

// expiry is when an idle version's keep-alive ends; ok is false while it
// is busy or kept for good.
func (m *model) expiry() (at time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.live > 0 || m.mu.keep < 0 {
		return time.Time{}, false
	}
	return m.mu.lastUsed.Add(m.mu.keep), true
}

// takeLoad is the load time the first request on a version loaded on
// demand reports (zero for every later request); peekLoad tells it
// without taking it.
func (m *model) takeLoad() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.res.onDemand || m.mu.loadTaken {
		return 0
	}
	m.mu.loadTaken = true
	return m.info.LoadTime
}

func (m *model) peekLoad() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.res.onDemand || m.mu.loadTaken {
		return 0
	}
	return m.info.LoadTime
}

func (m *model) drain() { m.drainOnce.Do(func() { close(m.drained) }) }

func (m *model) close() error {
	if m.dec != nil {
		return errors.Join(m.closePlugins(), m.dec.Close())
	}
	return errors.Join(m.closePlugins(), m.one.sess.Close())
}

// Tokenizer returns a decoder's tokenizer, or nil.
func (e *Engine) Tokenizer(model string) *tokenizer.Tokenizer {
	if m, err := e.model(model); err == nil {
		return m.tok
	}
	return nil
}
