package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
)

// mux is the scheduler's Decoder and Oneshot: it routes each call to the
// model version a sequence or batch belongs to, by the version's key. The
// scheduler calls it from its device loop only; the lock guards the set of
// versions, which Load, Swap and retirement change from other goroutines.
type mux struct {
	mu     sync.RWMutex
	models map[string]*model // by key, every version not yet freed

	owner map[sched.SeqID]*model // device loop only
}

func newMux() *mux {
	return &mux{models: map[string]*model{}, owner: map[sched.SeqID]*model{}}
}

func (x *mux) add(m *model) {
	x.mu.Lock()
	x.models[m.key] = m
	x.mu.Unlock()
}

func (x *mux) remove(m *model) {
	x.mu.Lock()
	delete(x.models, m.key)
	x.mu.Unlock()
}

func (x *mux) get(key string) *model {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.models[key]
}

func (x *mux) decoder(key string) (*model, error) {
	if m := x.get(key); m != nil && m.dec != nil {
		return m, nil
	}
	return nil, fmt.Errorf("%w: %q is not an open decoder", ErrUnknownModel, publicName(key))
}

func (x *mux) Admit(ctx context.Context, seq sched.Sequence) (int, error) {
	m, err := x.decoder(seq.Model)
	if err != nil {
		return 0, err
	}
	cached, err := m.dec.Admit(ctx, seq)
	if err == nil {
		x.owner[seq.ID] = m
	}
	return cached, err
}

func (x *mux) Extend(id sched.SeqID, n int) error {
	m := x.owner[id]
	if m == nil {
		return fmt.Errorf("engine: extend unknown sequence %d", id)
	}
	return m.dec.Extend(id, n)
}

func (x *mux) Release(id sched.SeqID) {
	if m := x.owner[id]; m != nil {
		m.dec.Release(id)
		delete(x.owner, id)
	}
}

func (x *mux) Step(ctx context.Context, b *sched.Batch) (sched.StepResult, error) {
	m, err := x.decoder(b.Model)
	if err != nil {
		return sched.StepResult{}, err
	}
	m.use.RLock()
	defer m.use.RUnlock()
	return m.dec.Step(ctx, b)
}

func (x *mux) Infer(ctx context.Context, key string, inputs []tensors) ([]tensors, error) {
	m := x.get(key)
	if m == nil || m.one == nil {
		return nil, fmt.Errorf("%w: %q is not an open one-shot model", ErrUnknownModel, publicName(key))
	}
	m.use.RLock()
	defer m.use.RUnlock()
	return m.one.run(ctx, inputs)
}

var (
	_ sched.Decoder          = (*mux)(nil)
	_ sched.Oneshot[tensors] = (*mux)(nil)
)
