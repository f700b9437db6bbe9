package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// Inputs are a one-shot model's named input tensors; the caller keeps
// ownership and closes them. Outputs are fresh tensors the caller closes.
type (
	Inputs  = map[string]*ort.Tensor
	Outputs = map[string]*ort.Tensor
)

// oneshot is a vision/audio model run by dynamic batching: requests queued
// together are concatenated along the batch axis when every input's first
// dimension is symbolic, run once, and the outputs split back.
type oneshot struct {
	name      string
	sess      *ort.Session
	batchable bool
}

func newOneshot(name string, s *ort.Session) *oneshot {
	o := &oneshot{name: name, sess: s, batchable: true}
	for _, v := range append(s.Inputs(), s.Outputs()...) {
		if len(v.Shape) == 0 || v.Shape[0] != -1 {
			o.batchable = false
		}
	}
	return o
}

func (o *oneshot) run(ctx context.Context, items []any) ([]any, error) {
	ins := make([]Inputs, len(items))
	for i, it := range items {
		in, ok := it.(Inputs)
		if !ok {
			return nil, fmt.Errorf("engine: %s: input is %T, want engine.Inputs", o.name, it)
		}
		ins[i] = in
	}
	if len(ins) == 1 || !o.batchable || !o.concatenable(ins) {
		return o.runEach(ctx, ins)
	}
	return o.runBatched(ctx, ins)
}

// runEach runs the requests one after another.
func (o *oneshot) runEach(ctx context.Context, ins []Inputs) ([]any, error) {
	out := make([]any, len(ins))
	for i, in := range ins {
		res, err := o.sess.Run(ctx, in)
		if err != nil {
			closeAll(out[:i])
			return nil, err
		}
		out[i] = Outputs(res)
	}
	return out, nil
}

// concatenable reports whether every request's inputs agree beyond the
// batch axis, so they can be joined into one run.
func (o *oneshot) concatenable(ins []Inputs) bool {
	for _, v := range o.sess.Inputs() {
		first := ins[0][v.Name]
		for _, in := range ins {
			t := in[v.Name]
			if t == nil || first == nil || t.DType() != v.DType || len(t.Shape()) == 0 || !sameTail(first.Shape(), t.Shape()) {
				return false
			}
		}
	}
	return true
}

func (o *oneshot) runBatched(ctx context.Context, ins []Inputs) ([]any, error) {
	joined := Inputs{}
	defer func() { _ = ort.CloseAll(joined) }()
	rows := make([]int64, len(ins))
	for _, v := range o.sess.Inputs() {
		var shape []int64
		var data []byte
		for i, in := range ins {
			t := in[v.Name]
			if t == nil {
				return nil, fmt.Errorf("%w: %s: request %d lacks input %q", ort.ErrMissingInput, o.name, i, v.Name)
			}
			s := t.Shape()
			if shape == nil {
				shape = append([]int64(nil), s...)
				shape[0] = 0
			}
			shape[0] += s[0]
			rows[i] = s[0]
			data = append(data, t.Bytes()...)
		}
		t, err := ort.CopyBytes(v.DType, shape, data)
		if err != nil {
			return nil, err
		}
		joined[v.Name] = t
	}
	res, err := o.sess.Run(ctx, joined)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ort.CloseAll(res) }()
	out := make([]any, len(ins))
	for i := range out {
		out[i] = Outputs{}
	}
	for name, t := range res {
		s := t.Shape()
		var total int64
		for _, r := range rows {
			total += r
		}
		if len(s) == 0 || s[0] != total {
			closeAll(out)
			return nil, fmt.Errorf("engine: %s: output %q has batch %v, expected %d: model is not batchable", o.name, name, s, total)
		}
		per := len(t.Bytes()) / int(total)
		off := 0
		for i, r := range rows {
			shape := append([]int64{r}, s[1:]...)
			part, err := ort.CopyBytes(t.DType(), shape, t.Bytes()[off:off+per*int(r)])
			if err != nil {
				closeAll(out)
				return nil, err
			}
			off += per * int(r)
			out[i].(Outputs)[name] = part
		}
	}
	return out, nil
}

func sameTail(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 1; i < len(a); i++ {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func closeAll(outs []any) {
	var errs []error
	for _, o := range outs {
		if m, ok := o.(Outputs); ok {
			errs = append(errs, ort.CloseAll(m))
		}
	}
	_ = errors.Join(errs...)
}
