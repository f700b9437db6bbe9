package ort

import (
	"context"
	"fmt"

	onnx "github.com/yalue/onnxruntime_go"
)

// Run feeds the named inputs and returns every output, allocated for this
// call; the caller closes them (CloseAll). Inputs are checked against the
// declared names, element types and shapes first: a fixed dimension must
// match, a symbolic one takes any size.
//
// Cancelling ctx terminates the native run; Run still returns only after
// ONNX Runtime has, with an error wrapping ctx.Err(). Float16 and bfloat16
// outputs of static shape are pre-allocated (the Go binding cannot
// auto-allocate them); dynamic ones must be given to RunInto.
func (s *Session) Run(ctx context.Context, inputs map[string]*Tensor) (map[string]*Tensor, error) {
	outputs := map[string]*Tensor{}
	if err := s.RunInto(ctx, inputs, outputs); err != nil {
		return nil, err
	}
	return outputs, nil
}

// RunInto is Run with caller-provided outputs: outputs already in the map
// (pre-allocated, e.g. off-heap with NewEmptyTensor) are written in place
// and checked like inputs; missing ones are allocated and added to the map,
// and the caller closes those. On error the map is left as given.
func (s *Session) RunInto(ctx context.Context, inputs, outputs map[string]*Tensor) error {
	in, err := s.orderInputs(inputs)
	if err != nil {
		return err
	}
	out := make([]onnx.Value, len(s.info.Outputs))
	fresh := map[string]*Tensor{} // outputs pre-allocated here, closed on error
	defer func() {
		for _, t := range fresh {
			_ = t.Close()
		}
	}()
	for name := range outputs {
		if _, ok := s.outIndex[name]; !ok {
			return fmt.Errorf("%w: output %q (model outputs: %v)", ErrUnknownInput, name, names(s.info.Outputs))
		}
	}
	for i, v := range s.info.Outputs {
		t := outputs[v.Name]
		if t == nil && needsPrealloc(v) {
			if !v.Static() {
				return fmt.Errorf("%w: output %q is %s with a dynamic shape %s: pass a pre-allocated tensor to RunInto", ErrInvalidTensor, v.Name, v.DType, FormatShape(v.Shape, v.DimNames))
			}
			if t, err = NewEmptyTensor(v.DType, v.Shape); err != nil {
				return err
			}
			fresh[v.Name] = t
		}
		if t == nil {
			continue
		}
		if err := check("output", v, t); err != nil {
			return err
		}
		if out[i] = t.native(); out[i] == nil {
			return fmt.Errorf("ort: output %q: %w", v.Name, ErrClosed)
		}
	}
	if err := s.run(ctx, in, out); err != nil {
		return err
	}
	for name, t := range fresh {
		outputs[name] = t
	}
	fresh = nil
	for i, v := range s.info.Outputs {
		if outputs[v.Name] != nil {
			continue
		}
		t, err := wrapOutput(out[i])
		if err != nil {
			return err
		}
		outputs[v.Name] = t
	}
	return nil
}

// needsPrealloc reports outputs the Go binding cannot allocate itself:
// float16/bfloat16 (it sizes them as one byte per element) and rank-0
// tensors (it rejects empty shapes).
func needsPrealloc(v ValueInfo) bool {
	return v.DType == Float16 || v.DType == BFloat16 || (v.Shape != nil && len(v.Shape) == 0)
}

func names(vs []ValueInfo) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Name
	}
	return out
}

// orderInputs validates the named inputs and puts them in the model's order.
func (s *Session) orderInputs(inputs map[string]*Tensor) ([]onnx.Value, error) {
	for name := range inputs {
		if _, ok := s.inIndex[name]; !ok {
			return nil, fmt.Errorf("%w: input %q (model inputs: %v)", ErrUnknownInput, name, names(s.info.Inputs))
		}
	}
	in := make([]onnx.Value, len(s.info.Inputs))
	for i, v := range s.info.Inputs {
		t := inputs[v.Name]
		if t == nil {
			return nil, fmt.Errorf("%w: %q (%s)", ErrMissingInput, v.Name, v)
		}
		if err := check("input", v, t); err != nil {
			return nil, err
		}
		if in[i] = t.native(); in[i] == nil {
			return nil, fmt.Errorf("ort: input %q: %w", v.Name, ErrClosed)
		}
	}
	return in, nil
}

// check compares a tensor with a declaration: element type, rank, and every
// fixed dimension; symbolic dimensions accept any size.
func check(kind string, v ValueInfo, t *Tensor) error {
	if v.Kind != "tensor" {
		return fmt.Errorf("%w: %s %q is a %s, not a tensor", ErrTypeMismatch, kind, v.Name, v.Kind)
	}
	if v.DType != t.dtype {
		return fmt.Errorf("%w: %s %q: expected %s, given %s%v", ErrTypeMismatch, kind, v.Name, v, t.dtype, t.shape)
	}
	if v.Shape == nil {
		return nil
	}
	ok := len(v.Shape) == len(t.shape)
	for i := 0; ok && i < len(v.Shape); i++ {
		ok = v.Shape[i] < 0 || v.Shape[i] == t.shape[i]
	}
	if !ok {
		return fmt.Errorf("%w: %s %q: expected %s, given %s%v", ErrShapeMismatch, kind, v.Name, v, t.dtype, t.shape)
	}
	return nil
}

// run executes one native run with cancellation and Close coordination.
func (s *Session) run(ctx context.Context, in, out []onnx.Value) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ort: run: %w", err)
	}
	rs, err := s.begin()
	if err != nil {
		return err
	}
	runErr, byClose := s.runNative(ctx, rs, in, out)
	switch {
	case runErr == nil:
		return nil
	case byClose:
		return fmt.Errorf("%w: %w: terminated by Close (%v)", ErrRun, ErrClosed, runErr)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w (%v)", ErrRun, ctx.Err(), runErr)
	}
	return fmt.Errorf("%w: %v", ErrRun, runErr)
}

// runNative makes the native call. A panic in the Go binding (it indexes
// its argument slices) becomes an error, and the run is always
// unregistered, so Close never waits for a run that is gone.
func (s *Session) runNative(ctx context.Context, rs *runState, in, out []onnx.Value) (err error, byClose bool) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("onnxruntime_go panic: %v", p)
		}
		byClose = s.end(rs)
	}()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, rs.terminate)
		defer stop()
	}
	return s.native.RunWithOptions(in, out, rs.ro), false
}

// begin registers a run, reusing idle run options.
func (s *Session) begin() (*runState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, fmt.Errorf("ort: run: %w", ErrClosed)
	}
	var rs *runState
	if n := len(s.mu.free); n > 0 {
		rs = s.mu.free[n-1]
		s.mu.free = s.mu.free[:n-1]
	} else {
		ro, err := onnx.NewRunOptions()
		if err != nil {
			return nil, fmt.Errorf("%w: run options: %v", ErrRun, err)
		}
		rs = &runState{ro: ro}
		rs.terminate = func() { s.terminate(rs) }
	}
	s.mu.active[rs] = struct{}{}
	s.runs.Add(1)
	if s.onBegin != nil {
		s.onBegin()
	}
	return rs, nil
}

// terminate is the context.AfterFunc of a run. It holds mu so it never races
// with end handing the options to another run.
func (s *Session) terminate(rs *runState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, live := s.mu.active[rs]; live && !rs.terminated {
		rs.terminated = true
		_ = rs.ro.Terminate()
	}
}

// end unregisters a run and reports whether Close terminated it.
func (s *Session) end(rs *runState) (byClose bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.runs.Done()
	delete(s.mu.active, rs)
	byClose = rs.byClose
	if rs.terminated {
		if err := rs.ro.UnsetTerminate(); err != nil {
			_ = rs.ro.Destroy()
			return byClose
		}
		rs.terminated, rs.byClose = false, false
	}
	if s.mu.closed {
		_ = rs.ro.Destroy()
		return byClose
	}
	s.mu.free = append(s.mu.free, rs)
	return byClose
}

// Binding is a fixed set of input and output tensors for one session,
// validated once, for a loop that runs the same shapes many times (the
// decode step): write new data into the tensors' memory, then Run. A Run
// through a Binding allocates nothing in this package.
//
// The tensors must stay open while bound. A Binding is not safe for
// concurrent use (Set and Run race); use one Binding per goroutine.
type Binding struct {
	s       *Session
	in, out []onnx.Value
	inT     []*Tensor
	outT    []*Tensor
}

// Bind validates inputs (all required) and outputs (all required,
// pre-allocated with the exact shapes the run will produce) once.
func (s *Session) Bind(inputs, outputs map[string]*Tensor) (*Binding, error) {
	in, err := s.orderInputs(inputs)
	if err != nil {
		return nil, err
	}
	b := &Binding{s: s, in: in, out: make([]onnx.Value, len(s.info.Outputs)),
		inT: make([]*Tensor, len(in)), outT: make([]*Tensor, len(s.info.Outputs))}
	for i, v := range s.info.Inputs {
		b.inT[i] = inputs[v.Name]
	}
	for name := range outputs {
		if _, ok := s.outIndex[name]; !ok {
			return nil, fmt.Errorf("%w: output %q (model outputs: %v)", ErrUnknownInput, name, names(s.info.Outputs))
		}
	}
	for i, v := range s.info.Outputs {
		t := outputs[v.Name]
		if t == nil {
			return nil, fmt.Errorf("%w: output %q must be pre-allocated for a Binding", ErrMissingInput, v.Name)
		}
		if err := check("output", v, t); err != nil {
			return nil, err
		}
		b.outT[i], b.out[i] = t, t.native()
	}
	return b, nil
}

// Set replaces one bound input or output (by name) with another tensor,
// validated like Bind; use it when a step's shape changes.
func (b *Binding) Set(name string, t *Tensor) error {
	if i, ok := b.s.inIndex[name]; ok {
		if err := check("input", b.s.info.Inputs[i], t); err != nil {
			return err
		}
		b.inT[i], b.in[i] = t, t.native()
		return nil
	}
	if i, ok := b.s.outIndex[name]; ok {
		if err := check("output", b.s.info.Outputs[i], t); err != nil {
			return err
		}
		b.outT[i], b.out[i] = t, t.native()
		return nil
	}
	return fmt.Errorf("%w: %q", ErrUnknownInput, name)
}

// Run runs the session on the bound tensors, writing the outputs in place.
// Cancellation and Close behave as for Session.Run.
func (b *Binding) Run(ctx context.Context) error {
	for _, ts := range [2][]*Tensor{b.inT, b.outT} {
		for _, t := range ts {
			if t.native() == nil {
				return fmt.Errorf("ort: bound tensor: %w", ErrClosed)
			}
		}
	}
	return b.s.run(ctx, b.in, b.out)
}
