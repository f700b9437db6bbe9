package sched

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// blockingDecoder's Step signals entered, then waits for leave.
type blockingDecoder struct {
	fakeExec
	entered, leave chan struct{}
	left           atomic.Bool // the step is done with the model
}

func (d *blockingDecoder) Step(ctx context.Context, b *Batch) (StepResult, error) {
	d.entered <- struct{}{}
	<-d.leave
	d.left.Store(true)
	return StepResult{}, nil
}

// TestRouterRemoveWaitsForStep: Remove returns only once the step inside
// the model has left it, and calls after Remove fail with
// ErrUnknownModel instead of reaching the (about to be freed) model.
func TestRouterRemoveWaitsForStep(t *testing.T) {
	r := NewRouter[any]()
	d := &blockingDecoder{fakeExec: *newFake(16, 4), entered: make(chan struct{}), leave: make(chan struct{})}
	r.Add("m#1", d, nil)
	stepped := make(chan error, 1)
	go func() {
		_, err := r.Step(context.Background(), &Batch{Model: "m#1"})
		stepped <- err
	}()
	<-d.entered
	removing := make(chan struct{})
	r.removing = func() { close(removing) }
	removed := make(chan bool)
	go func() { r.Remove("m#1"); removed <- d.left.Load() }()
	<-removing // the route is out: a call now would fail
	close(d.leave)
	if err := <-stepped; err != nil {
		t.Fatal(err)
	}
	if !<-removed {
		t.Fatal("Remove returned while a step was inside the model")
	}
	if _, err := r.Step(context.Background(), &Batch{Model: "m#1"}); !errors.Is(err, ErrUnknownModel) {
		t.Fatalf("step after Remove: %v", err)
	}
	if _, err := r.Infer(context.Background(), "m#1", nil); !errors.Is(err, ErrUnknownModel) {
		t.Fatalf("infer of a decoder key: %v", err)
	}
}

// maintainDecoder counts Maintain calls and fails a call made after the
// model was removed (it may be closing then).
type maintainDecoder struct {
	fakeExec
	t       *testing.T
	calls   atomic.Int32
	removed atomic.Bool
}

func (d *maintainDecoder) Maintain(time.Time) {
	if d.removed.Load() {
		d.t.Error("Maintain called on a removed model")
	}
	d.calls.Add(1)
}

// TestRouterMaintainSkipsRemoved: a model removed after Maintain listed
// the routes, before it reached the model, is not called: Remove returned,
// and its owner is closing it.
func TestRouterMaintainSkipsRemoved(t *testing.T) {
	r := NewRouter[any]()
	d := &maintainDecoder{fakeExec: *newFake(16, 4), t: t}
	r.Add("m#1", d, nil)
	r.Maintain(time.Now())
	if d.calls.Load() != 1 {
		t.Fatalf("Maintain reached the model %d times, want 1", d.calls.Load())
	}
	r.listed = func() {
		r.Remove("m#1")
		d.removed.Store(true)
	}
	r.Maintain(time.Now())
	if d.calls.Load() != 1 {
		t.Errorf("Maintain reached a model removed meanwhile")
	}
}
