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
	mu   sync.Mutex
	recs []engine.Record
}

func (s *recordSink) ObserveTimeline(r *engine.Record) {
	s.mu.Lock()
	s.recs = append(s.recs, *r)
	s.mu.Unlock()
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

	deadline := time.Now().Add(5 * time.Second)
	for {
		sink.mu.Lock()
		n := len(sink.recs)
		sink.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
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
