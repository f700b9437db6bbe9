package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// Inputs are a one-shot model's named input tensors; the caller keeps
// ownership and closes them.
type Inputs map[string]*ort.Tensor

// Outputs are a one-shot model's named output tensors: fresh tensors the
// caller owns and frees with Close.
type Outputs map[string]*ort.Tensor

// Close frees every tensor.
func (o Outputs) Close() error { return ort.CloseAll(o) }

// InferOptions configure one one-shot request, like GenerateOptions.
type InferOptions struct {
	// Class is the priority class; the zero value is interactive.
	Class Class
	// SLO bounds the time to the result (TTFT) and ends the request at its
	// Deadline; zero fields are unbounded.
	SLO SLO
	// FailFast refuses the request at once (an *OverloadError) when its
	// TTFT SLO cannot be met.
	FailFast bool
	// KeepAlive is as in GenerateOptions.
	KeepAlive *time.Duration
}

// Infer runs a one-shot model on inputs through the scheduler's dynamic
// batching (requests of one model queued together run as one batch) and
// returns its outputs, which the caller closes.
func (e *Engine) Infer(ctx context.Context, model string, inputs Inputs, opts InferOptions) (Outputs, error) {
	m, err := e.acquire(ctx, model, opts.KeepAlive)
	if err != nil {
		return nil, err
	}
	defer m.end()
	if m.one == nil {
		return nil, fmt.Errorf("%w: %q is a decoder (use Generate)", ErrInvalidRequest, model)
	}
	if m.pl != nil { // pre plugin -> model -> post plugin
		return e.inferPipeline(ctx, m, inputs, opts)
	}
	res, err := e.s.Infer(ctx, sched.InferRequest[tensors]{
		Model: m.key, Class: opts.Class.sched(), Input: inputs, SLO: sched.SLO(opts.SLO), FailFast: opts.FailFast,
		LoadTime: m.takeLoad(),
	})
	if err != nil {
		return nil, public(err)
	}
	return res.Output, nil
}

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

// Run implements sched.Runner: the device loop's call for a batch.
func (o *oneshot) Run(ctx context.Context, ins []tensors) ([]tensors, error) {
	if len(ins) == 1 || !o.batchable || !o.concatenable(ins) {
		return o.runEach(ctx, ins)
	}
	return o.runBatched(ctx, ins)
}

// runEach runs the requests one after another.
func (o *oneshot) runEach(ctx context.Context, ins []tensors) ([]tensors, error) {
	out := make([]tensors, len(ins))
	for i, in := range ins {
		res, err := o.sess.Run(ctx, in)
		if err != nil {
			closeAll(out[:i])
			return nil, err
		}
		out[i] = res
	}
	return out, nil
}

// concatenable reports whether every request's inputs agree beyond the
// batch axis, so they can be joined into one run.
func (o *oneshot) concatenable(ins []tensors) bool {
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

func (o *oneshot) runBatched(ctx context.Context, ins []tensors) ([]tensors, error) {
	joined := tensors{}
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
	out := make([]tensors, len(ins))
	for i := range out {
		out[i] = tensors{}
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
			out[i][name] = part
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

func closeAll(outs []tensors) {
	for _, o := range outs {
		_ = ort.CloseAll(o) // freeing host memory: nothing to report
	}
}
