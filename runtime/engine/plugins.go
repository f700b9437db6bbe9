package engine

// A one-shot model whose bundle lists plugins (bundle.Plugins) runs them as
// part of Infer: the pre plugin turns the request's tensors (an encoded
// image as a uint8 tensor "image", say) into the model's inputs, the model
// runs through the scheduler like any request, and the post plugin turns
// its outputs (plus the pre plugin's other outputs) into the result. The
// plugins run in the caller's goroutine, sandboxed by runtime/plugin, never
// on the device loop. The request's Record gets their time apart
// (Record.Pre, Record.Post; Arrived..Finished stay the model's queue and
// run): the scheduler's record is held back until the post plugin is done.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// pluginState holds pipeline requests' records until their times are known.
type pluginState struct {
	mu    sync.Mutex
	keys  map[string]bool             // scheduler keys of models with plugins
	held  map[uint64]sched.Timeline   // finished in the scheduler, post pending
	times map[uint64][2]time.Duration // pre, post of requests done before their record came
	// pending are records whose times were known when they arrived,
	// delivered by flushPending outside the lock.
	pending []heldRecord
	wake    chan struct{} // tells the record pump that pending grew
}

// woken is the channel the record pump also waits on.
func (st *pluginState) woken() <-chan struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.wake == nil {
		st.wake = make(chan struct{}, 1)
	}
	return st.wake
}

// openPlugins loads the bundle's plugins for m, if it lists any.
func (e *Engine) openPlugins(ctx context.Context, m *model, b *bundle.Bundle) error {
	if b.Manifest.Plugins == nil {
		return nil
	}
	pl, err := plugin.OpenPipeline(ctx, b, plugin.Config{MaxInstances: max(2, e.s.Config().InferMaxBatch)})
	if err != nil {
		return fmt.Errorf("engine: %s plugins: %w", m.name, err)
	}
	m.pl = pl
	return nil
}

// registerPlugins marks m's scheduler key, once the key is known.
func (e *Engine) registerPlugins(m *model) {
	if m.pl == nil {
		return
	}
	st := &e.plugins
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.keys == nil {
		st.keys, st.held, st.times = map[string]bool{}, map[uint64]sched.Timeline{}, map[uint64][2]time.Duration{}
	}
	st.keys[m.key] = true
}

// InferTensors runs a one-shot model whose bundle lists plugins on plugin
// tensors (runtime/plugin/abi): the pre plugin's request as it is given,
// the post plugin's result as it comes. Unlike Infer, the result may hold
// what no ONNX Runtime tensor holds, such as text (abi.String: labels, a
// recognised line, JSON). A model without plugins is refused with
// ErrInvalidRequest: use Infer.
func (e *Engine) InferTensors(ctx context.Context, model string, inputs []abi.Tensor, opts InferOptions) ([]abi.Tensor, error) {
	m, err := e.acquire(ctx, model, opts.KeepAlive)
	if err != nil {
		return nil, err
	}
	defer m.end()
	if m.pl == nil {
		return nil, fmt.Errorf("%w: %q lists no plugins (use Infer)", ErrInvalidRequest, model)
	}
	return e.pipeline(ctx, m, inputs, opts)
}

// inferPipeline is Infer for a model with plugins.
func (e *Engine) inferPipeline(ctx context.Context, m *model, inputs Inputs, opts InferOptions) (Outputs, error) {
	req, err := fromORT(inputs)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidRequest, m.name, err)
	}
	result, err := e.pipeline(ctx, m, req, opts)
	if err != nil {
		return nil, err
	}
	out, err := toORT(result)
	if err != nil {
		_ = ort.CloseAll(out)
		return nil, fmt.Errorf("engine: %s: post plugin output: %w (InferTensors returns it)", m.name, err)
	}
	return out, nil
}

// pipeline runs pre plugin -> model (through the scheduler) -> post plugin.
func (e *Engine) pipeline(ctx context.Context, m *model, req []abi.Tensor, opts InferOptions) ([]abi.Tensor, error) {
	names := make([]string, len(m.info.Inputs))
	for i, v := range m.info.Inputs {
		names[i] = v.Name
	}
	t0 := time.Now()
	feeds, pass, err := m.pl.Pre(ctx, req, names)
	pre := time.Since(t0)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %w", m.name, err)
	}
	in, err := toORT(feeds)
	defer func() { _ = ort.CloseAll(in) }()
	if err != nil {
		return nil, fmt.Errorf("engine: %s: pre plugin output: %w", m.name, err)
	}
	res, err := e.s.Infer(ctx, sched.InferRequest[tensors]{
		Model: m.key, Class: opts.Class.sched(), Input: in, SLO: sched.SLO(opts.SLO), FailFast: opts.FailFast,
	})
	id := res.Timeline.ID
	if err != nil {
		e.pluginsDone(id, pre, 0)
		return nil, public(err)
	}
	outs, err := fromORT(res.Output)
	_ = ort.CloseAll(res.Output)
	if err != nil {
		e.pluginsDone(id, pre, 0)
		return nil, fmt.Errorf("engine: %s: %w", m.name, err)
	}
	t1 := time.Now()
	result, err := m.pl.Post(ctx, outs, pass)
	e.pluginsDone(id, pre, time.Since(t1))
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %w", m.name, err)
	}
	return result, nil
}

// pluginsDone gives request id its plugin times; its record goes to the
// observers next if the scheduler already finished it, else when it does. id 0 (no
// record: the request was refused before it had one) is ignored.
func (e *Engine) pluginsDone(id uint64, pre, post time.Duration) {
	if id == 0 {
		return
	}
	st := &e.plugins
	st.mu.Lock()
	defer st.mu.Unlock()
	tl, ok := st.held[id]
	if !ok {
		st.times[id] = [2]time.Duration{pre, post}
		return
	}
	delete(st.held, id)
	// Observers run on the record pump's goroutine only: hand it over.
	st.pending = append(st.pending, heldRecord{tl, pre, post})
	if st.wake == nil {
		st.wake = make(chan struct{}, 1)
	}
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// holdPluginRecords takes out of recs the completed or failed records of
// plugin models whose post plugin has not finished; the rest pass.
// Rejected requests never reach the plugins' accounting: they pass.
func (e *Engine) holdPluginRecords(recs []sched.Timeline) []sched.Timeline {
	st := &e.plugins
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.keys) == 0 {
		return recs
	}
	out := recs[:0]
	for _, r := range recs {
		if !st.keys[r.Model] || r.Outcome == sched.OutcomeRejected {
			out = append(out, r)
			continue
		}
		if t, ok := st.times[r.ID]; ok {
			delete(st.times, r.ID)
			st.pending = append(st.pending, heldRecord{r, t[0], t[1]})
			continue
		}
		st.held[r.ID] = r
	}
	return out
}

type heldRecord struct {
	tl        sched.Timeline
	pre, post time.Duration
}

// deliverHeld passes one pipeline record, with its plugin times, to the
// observers (on the record pump's goroutine).
func (e *Engine) deliverHeld(tl sched.Timeline, pre, post time.Duration) {
	r := recordOf(&tl)
	r.Pre, r.Post = pre, post
	e.mu.RLock()
	obs := e.mu.observers
	e.mu.RUnlock()
	for _, o := range obs {
		o.o.ObserveTimeline(r)
	}
}

// flushPending delivers records whose times came first (called by deliver
// after the scheduler's batch, outside the plugin lock).
func (e *Engine) flushPending() {
	e.plugins.mu.Lock()
	p := e.plugins.pending
	e.plugins.pending = nil
	e.plugins.mu.Unlock()
	for _, h := range p {
		e.deliverHeld(h.tl, h.pre, h.post)
	}
}

func (m *model) closePlugins() error {
	if m.pl == nil {
		return nil
	}
	return m.pl.Close(context.Background())
}

// toORT copies plugin tensors into ONNX Runtime tensors.
func toORT(ts []abi.Tensor) (tensors, error) {
	m := tensors{}
	for _, t := range ts {
		dt, ok := ortTypes[t.DType]
		if !ok {
			return m, fmt.Errorf("tensor %s: %s has no ONNX Runtime type", t.Name, t.DType)
		}
		o, err := ort.CopyBytes(dt, t.Shape, t.Data)
		if err != nil {
			return m, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		m[t.Name] = o
	}
	return m, nil
}

// fromORT copies ONNX Runtime tensors into plugin tensors.
func fromORT(m tensors) ([]abi.Tensor, error) {
	out := make([]abi.Tensor, 0, len(m))
	for name, t := range m {
		if t == nil {
			return nil, fmt.Errorf("tensor %s is nil", name)
		}
		var dt abi.DType
		for a, o := range ortTypes {
			if o == t.DType() {
				dt = a
			}
		}
		if dt == 0 {
			return nil, errors.New("tensor " + name + ": " + t.DType().String() + " has no plugin type")
		}
		out = append(out, abi.Tensor{Name: name, DType: dt, Shape: t.Shape(), Data: append([]byte(nil), t.Bytes()...)})
	}
	return out, nil
}

var ortTypes = map[abi.DType]ort.DType{
	abi.Float32: ort.Float32, abi.Int64: ort.Int64, abi.Int32: ort.Int32,
	abi.Uint8: ort.Uint8, abi.Float64: ort.Float64,
}
