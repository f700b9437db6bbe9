package engine_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/plugintest"
)

type recordSink struct {
	mu      sync.Mutex
	recs    []engine.Record
	arrived chan struct{} // closed on the next record; nil until a waiter needs it
}

func (s *recordSink) ObserveTimeline(r *engine.Record) {
	s.mu.Lock()
	s.recs = append(s.recs, *r)
	if s.arrived != nil {
		close(s.arrived)
		s.arrived = nil
	}
	s.mu.Unlock()
}

// wait waits (up to 5 s) until at least n records arrived and returns a
// copy of them all. Records reach observers shortly after a request ends,
// on the engine's own goroutine.
func (s *recordSink) wait(t *testing.T, n int) []engine.Record {
	t.Helper()
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		recs := slices.Clone(s.recs)
		if s.arrived == nil {
			s.arrived = make(chan struct{})
		}
		c := s.arrived
		s.mu.Unlock()
		if len(recs) >= n {
			return recs
		}
		select {
		case <-c:
		case <-timeout.C:
			t.Fatalf("%d records after 5 s, want %d", len(recs), n)
		}
	}
}

// TestInferPlugins: a bundle with the BlazeFace model and its plugins runs
// pre -> model -> post inside Infer, from JPEG bytes to faces, and the
// request's record carries the plugins' time apart.
func TestInferPlugins(t *testing.T) {
	dir, photo := plugintest.FaceBundle(t)

	sink := &recordSink{}
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Models: []engine.ModelSpec{{Dir: dir}}, Observers: []engine.Observer{sink}})
	if err != nil {
		t.Skipf("engine with ONNX Runtime: %v", err)
	}
	defer e.Close(ctx)
	jpg, _ := os.ReadFile(photo)
	img, _ := ort.CopyTensor([]int64{int64(len(jpg))}, jpg)
	crop, _ := ort.CopyTensor([]int64{4}, []int64{15, 535, 70, 70})
	defer img.Close()
	defer crop.Close()
	out, err := e.Infer(ctx, "faces", engine.Inputs{"image": img, "crop": crop}, engine.InferOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ort.CloseAll(out)
	faces := out["faces"]
	if faces == nil || len(faces.Shape()) != 2 || faces.Shape()[0] != 1 || faces.Shape()[1] != 5 {
		t.Fatalf("outputs %v, want faces [1,5]", out)
	}
	v, _ := ort.Data[float32](faces)
	t.Logf("face %v", v)

	sink.wait(t, 1)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.recs) != 1 {
		t.Fatalf("%d records, want 1", len(sink.recs))
	}
	r := sink.recs[0]
	if r.Pre <= 0 || r.Post <= 0 || r.Model != "faces" {
		t.Errorf("record model %q pre %v post %v, want both timed", r.Model, r.Pre, r.Post)
	}
	t.Logf("pre %v, model %v, post %v", r.Pre, r.Finished.Sub(r.Arrived), r.Post)

	// The same request on plugin tensors gives the same result, and the
	// model's info names its plugins.
	got, err := e.InferTensors(ctx, "faces", []abi.Tensor{abi.Bytes("image", jpg), abi.I64("crop", []int64{4}, []int64{15, 535, 70, 70})}, engine.InferOptions{})
	if err != nil || len(got) != 1 || got[0].Name != "faces" {
		t.Fatalf("InferTensors: %v, %v", got, err)
	}
	if w, _ := got[0].Float32s(); !slices.Equal(w, v) {
		t.Errorf("InferTensors %v, Infer %v", w, v)
	}
	if info := e.Models()[0]; info.Plugins["pre"].Wazero == "" || info.Plugins["post"].Name == "" {
		t.Errorf("model info plugins %+v", info.Plugins)
	}
}
