package engine

import (
	"context"
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/llm"
	"github.com/edgeinfer/edgeinfer/runtime/sched"
)

// mux is the scheduler's one Executor: it routes each call to the model a
// sequence or batch belongs to. The scheduler calls it from its device loop
// only, so it needs no lock.
type mux struct {
	decoders map[string]*llm.Model
	oneshots map[string]*oneshot
	owner    map[sched.SeqID]*llm.Model
}

func (x *mux) decoder(name string) (*llm.Model, error) {
	if m := x.decoders[name]; m != nil {
		return m, nil
	}
	return nil, fmt.Errorf("%w: %q is not an open decoder", ErrUnknownModel, name)
}

func (x *mux) Admit(ctx context.Context, seq sched.Sequence) (int, error) {
	m, err := x.decoder(seq.Model)
	if err != nil {
		return 0, err
	}
	cached, err := m.Admit(ctx, seq)
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
	return m.Extend(id, n)
}

func (x *mux) Release(id sched.SeqID) {
	if m := x.owner[id]; m != nil {
		m.Release(id)
		delete(x.owner, id)
	}
}

func (x *mux) Step(ctx context.Context, b *sched.Batch) (sched.StepResult, error) {
	m, err := x.decoder(b.Model)
	if err != nil {
		return sched.StepResult{}, err
	}
	return m.Step(ctx, b)
}

func (x *mux) Infer(ctx context.Context, model string, inputs []any) ([]any, error) {
	o := x.oneshots[model]
	if o == nil {
		return nil, fmt.Errorf("%w: %q is not an open one-shot model", ErrUnknownModel, model)
	}
	return o.run(ctx, inputs)
}
