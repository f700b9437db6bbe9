package engine

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

const (
	visionIn  = orttest.CameraIn
	visionOut = orttest.CameraOut
)

func writeVisionModel(t testing.TB) string { return orttest.CameraModel(t) }

func frame(i int) []float32 {
	x := make([]float32, visionIn)
	for j := range x {
		x[j] = float32(math.Sin(float64(i*visionIn + j)))
	}
	return x
}

// infer runs one frame and returns y.
func infer(ctx context.Context, e *Engine, i int, class Class) ([]float32, error) {
	x, err := ort.CopyTensor([]int64{1, visionIn}, frame(i))
	if err != nil {
		return nil, err
	}
	defer x.Close()
	out, err := e.Infer(ctx, "camera", Inputs{"x": x}, InferOptions{Class: class})
	if err != nil {
		return nil, err
	}
	defer out.Close()
	y, err := ort.Data[float32](out["y"])
	return append([]float32(nil), y...), err
}

// Concurrent Infer calls are batched dynamically, and each gets exactly
// (to float rounding) what it gets alone.
func TestInferDynamicBatching(t *testing.T) {
	orttest.Need(t)
	ctx := context.Background()
	snk := &sink{}
	e, err := Open(ctx, Config{
		Models:  []ModelSpec{{Dir: writeVisionModel(t)}},
		Session: ort.Options{IntraOpThreads: 1},
		// the first request waits for others to join its batch
		Scheduler: SchedulerConfig{InferMaxBatch: 8, InferMaxDelay: 20 * time.Millisecond},
		Observers: []Observer{snk},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	const n = 16
	alone := make([][]float32, n)
	for i := range n {
		if alone[i], err = infer(ctx, e, i, ClassInteractive); err != nil {
			t.Fatal(err)
		}
	}
	before := e.Stats().Scheduler
	snk.take(t, n)
	got := make([][]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i], errs[i] = infer(ctx, e, i, ClassInteractive) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("frame %d: %v", i, errs[i])
		}
		if len(got[i]) != visionOut {
			t.Fatalf("frame %d: %d outputs", i, len(got[i]))
		}
		for j := range got[i] {
			if d := math.Abs(float64(got[i][j] - alone[i][j])); d > 1e-5 {
				t.Fatalf("frame %d output %d: batched %v, alone %v", i, j, got[i][j], alone[i][j])
			}
		}
	}
	after := e.Stats().Scheduler
	batches, items := after.InferBatches-before.InferBatches, after.InferItems-before.InferItems
	maxBatch := 0
	for _, r := range snk.take(t, n) {
		if r.Kind != "infer" || r.Outcome != metrics.Completed || r.Model != "camera" {
			t.Fatalf("record %+v", r)
		}
		maxBatch = max(maxBatch, r.BatchSize)
	}
	t.Logf("%d requests ran in %d batches (largest %d)", items, batches, maxBatch)
	if items != n || batches >= items || maxBatch < 2 {
		t.Fatalf("no dynamic batching: %d items in %d batches, largest %d", items, batches, maxBatch)
	}
}

// Camera frames at 10 FPS beside a streaming chat keep their p99 latency
// within one decode step of their p99 alone (plus a slack for a shared,
// noisy machine): the one-shot work is served at step boundaries, so a frame
// waits for at most the step in flight.
func TestCameraBesideChat(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 10 FPS for 2×3 s")
	}
	orttest.Need(t)
	ctx := context.Background()
	snk := &sink{}
	e, err := Open(ctx, Config{
		Models:    []ModelSpec{{Dir: tinyBundle(t)}, {Dir: writeVisionModel(t)}},
		Session:   ort.Options{IntraOpThreads: 1},
		Scheduler: SchedulerConfig{ChunkSize: 32},
		Observers: []Observer{snk},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	const frames = 30 // 3 s at 10 FPS
	completedFrame := func(r *Record) bool { return r.Kind == "infer" && r.Outcome == metrics.Completed }
	// camera sends a frame every 100 ms and returns the latencies the
	// scheduler stamped (arrived → result), free of the test goroutine's
	// own wake-up delays on a busy machine.
	camera := func() []time.Duration {
		snk.reset()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := range frames {
			<-tick.C
			if _, err := infer(ctx, e, i, ClassRealtime); err != nil {
				t.Fatal(err)
			}
		}
		var lat []time.Duration
		for _, r := range snk.takeWhere(t, frames, completedFrame) {
			lat = append(lat, ttft(r))
		}
		return lat
	}
	if _, err := infer(ctx, e, 0, ClassRealtime); err != nil { // warm-up
		t.Fatal(err)
	}
	// the warm-up's record reaches the sink after Infer returns: let it land
	// before camera clears the sink, or it counts as one of the frames
	snk.take(t, 1)
	solo := camera()

	// the chat streams back to back until the camera is done
	chatCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var tpots []time.Duration
	decoding := make(chan struct{})
	wg.Go(func() {
		var once sync.Once
		for k := 0; chatCtx.Err() == nil; k++ {
			var times []time.Time
			for tok, err := range e.GenerateTokens(chatCtx, "tiny-test", ids(40, k), GenerateOptions{MaxTokens: 400}).Tokens() {
				if err != nil {
					break
				}
				times = append(times, tok.Time)
				once.Do(func() { close(decoding) })
			}
			if n := len(times); n > 1 {
				tpots = append(tpots, times[n-1].Sub(times[0])/time.Duration(n-1))
			}
		}
	})
	<-decoding // the chat is decoding
	busy := camera()
	stop()
	wg.Wait()
	step := quantile(tpots, 0.5)
	if step == 0 {
		t.Fatal("the chat produced no tokens")
	}
	// What is being checked: a frame runs at the next step boundary, not
	// after the chat's generation (a loop that ran frames only between
	// generations made the median frame 25 ms and 19 of 30 frames late: a
	// frame then waits half a 400-token generation, 200 steps, on average).
	// The bounds are counted in the chat's own decode steps, measured in the
	// same run, so they stretch with the machine's load as the frames do:
	// under stress-ng on both cores a 0.22 ms step and a 2.7 ms median frame
	// were seen together, which a fixed 2 ms allowance called a failure.
	// The median frame may wait 25 steps (an eighth of the defect's wait);
	// a loaded machine's hiccups land on a few frames whichever the policy
	// (one took 28 ms beside a 180 µs step under load 5), so the tail is
	// judged by count: at most 3 of the 30 frames past the solo maximum +
	// 25 steps + 15 ms.
	const allowedSteps = 25
	p50, s50 := quantile(busy, 0.5), quantile(solo, 0.5)
	s99 := quantile(solo, 0.99)
	late := 0
	for _, d := range busy {
		if d > s99+allowedSteps*step+15*time.Millisecond {
			late++
		}
	}
	t.Logf("camera latency p50/p99 solo %v/%v, beside chat %v/%v; chat decode step %v; %d of %d frames past the tail bound",
		s50, s99, p50, quantile(busy, 0.99), step, late, frames)
	if bound := s50 + allowedSteps*step; p50 > bound {
		t.Errorf("camera median beside chat %v exceeds solo median %v + %d chat decode steps of %v: frames wait for the chat", p50, s50, allowedSteps, step)
	}
	if late > 3 {
		t.Errorf("%d of %d frames beside the chat took longer than the solo maximum %v + %d decode steps of %v + 15 ms: frames waited for the chat", late, frames, s99, allowedSteps, step)
	}
}
