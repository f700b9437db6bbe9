package sched

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrUnknownModel reports a call for a model key no Decoder or Runner is
// registered under (it was removed while the call waited). The engine
// returns it as its own ErrUnknownModel, hence the text.
var ErrUnknownModel = errors.New("engine: unknown model")

// Runner runs one one-shot model: a batch of inputs, one output each, in
// order.
type Runner[P any] interface {
	Run(ctx context.Context, inputs []P) ([]P, error)
}

// Router is a scheduler's Decoder and Oneshot over several models, and
// over two versions of one during a swap: each call goes to the Decoder
// or Runner registered under the key its request named, so the device
// loop calls the model's executor directly, never back into the layer
// that submitted the request. Add and Remove may be called from any
// goroutine; the Decoder and Oneshot methods from the device loop only.
type Router[P any] struct {
	mu     sync.RWMutex
	routes map[string]*route[P]

	owner map[SeqID]*route[P] // device loop only

	removing func() // test hook: Remove took the route out and is about to wait
	listed   func() // test hook: Maintain took its list of routes
}

// route is one registered model. use is held shared by every call into it
// (a step, a one-shot batch) and exclusively by Remove, so a removed
// model is never freed under a running call.
type route[P any] struct {
	use     sync.RWMutex
	dec     Decoder
	one     Runner[P]
	removed bool // set under use by Remove: a caller that looked the route up before must not call in
}

// NewRouter returns an empty Router.
func NewRouter[P any]() *Router[P] {
	return &Router[P]{routes: map[string]*route[P]{}, owner: map[SeqID]*route[P]{}}
}

// Add registers a model's executor under key: a Decoder, or a Runner for
// a one-shot model (the other nil).
func (r *Router[P]) Add(key string, dec Decoder, one Runner[P]) {
	r.mu.Lock()
	r.routes[key] = &route[P]{dec: dec, one: one}
	r.mu.Unlock()
}

// Remove unregisters key and returns once no call is inside its model:
// the caller may free the model then.
func (r *Router[P]) Remove(key string) {
	r.mu.Lock()
	rt := r.routes[key]
	delete(r.routes, key)
	r.mu.Unlock()
	if r.removing != nil {
		r.removing()
	}
	if rt != nil {
		rt.use.Lock() // waits for a step or batch still inside
		rt.removed = true
		rt.use.Unlock()
	}
}

func (r *Router[P]) get(key string) *route[P] {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.routes[key]
}

func (r *Router[P]) decoder(key string) (*route[P], error) {
	if rt := r.get(key); rt != nil && rt.dec != nil {
		return rt, nil
	}
	return nil, fmt.Errorf("%w: %q is not an open decoder", ErrUnknownModel, key)
}

// Admit implements Decoder.
func (r *Router[P]) Admit(ctx context.Context, seq Sequence) (int, error) {
	rt, err := r.decoder(seq.Model)
	if err != nil {
		return 0, err
	}
	cached, err := rt.dec.Admit(ctx, seq)
	if err == nil {
		r.owner[seq.ID] = rt
	}
	return cached, err
}

// Extend implements Decoder.
func (r *Router[P]) Extend(id SeqID, n int) error {
	rt := r.owner[id]
	if rt == nil {
		return fmt.Errorf("sched: extend unknown sequence %d", id)
	}
	return rt.dec.Extend(id, n)
}

// Release implements Decoder.
func (r *Router[P]) Release(id SeqID) {
	if rt := r.owner[id]; rt != nil {
		rt.dec.Release(id)
		delete(r.owner, id)
	}
}

// Step implements Decoder.
func (r *Router[P]) Step(ctx context.Context, b *Batch) (StepResult, error) {
	rt, err := r.decoder(b.Model)
	if err != nil {
		return StepResult{}, err
	}
	rt.use.RLock()
	defer rt.use.RUnlock()
	if rt.removed {
		return StepResult{}, fmt.Errorf("%w: %q was removed", ErrUnknownModel, b.Model)
	}
	return rt.dec.Step(ctx, b)
}

// Maintain implements Maintainer: every registered Decoder that has
// upkeep does it.
func (r *Router[P]) Maintain(now time.Time) {
	r.mu.RLock()
	routes := make([]*route[P], 0, len(r.routes))
	for _, rt := range r.routes {
		routes = append(routes, rt)
	}
	r.mu.RUnlock()
	if r.listed != nil {
		r.listed()
	}
	for _, rt := range routes {
		m, ok := rt.dec.(Maintainer)
		if !ok {
			continue
		}
		rt.use.RLock()
		if !rt.removed { // Remove ran after the list was taken: the model may be closing
			m.Maintain(now)
		}
		rt.use.RUnlock()
	}
}

// Infer implements Oneshot.
func (r *Router[P]) Infer(ctx context.Context, key string, inputs []P) ([]P, error) {
	rt := r.get(key)
	if rt == nil || rt.one == nil {
		return nil, fmt.Errorf("%w: %q is not an open one-shot model", ErrUnknownModel, key)
	}
	rt.use.RLock()
	defer rt.use.RUnlock()
	if rt.removed {
		return nil, fmt.Errorf("%w: %q was removed", ErrUnknownModel, key)
	}
	return rt.one.Run(ctx, inputs)
}

var (
	_ Decoder      = (*Router[int])(nil)
	_ Oneshot[int] = (*Router[int])(nil)
)
