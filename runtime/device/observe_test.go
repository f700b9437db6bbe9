package device_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/device"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// TestAgentObservesEngine: requests run by a real engine reach the
// telemetry through the device's adapter (what the agent wires), per model and class.
func TestAgentObservesEngine(t *testing.T) {
	orttest.Need(t)
	cfg, src, err := llama.Preset("tiny-test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := build.BuildDecoder(context.Background(), dir, build.DecoderSpec{Name: "tiny-test", Version: "1", Config: cfg, Weights: src}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ecfg := engine.Config{Models: []engine.ModelSpec{{Dir: dir}}}
	ecfg.Session.IntraOpThreads = 1
	e, err := engine.Open(ctx, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	tel := link.NewTelemetry(nil, nil, link.TelemetryConfig{}, link.Sources{Engine: func() link.EngineStats { return device.EngineStats(e) }})
	seen := make(chan struct{}, 64)
	stop := e.Observe(signalObserver{device.Records(tel), seen})
	defer stop()
	for i := 0; i < 5; i++ {
		class := engine.ClassInteractive
		if i%2 == 1 {
			class = engine.ClassBatch
		}
		for _, err := range e.GenerateTokens(ctx, "tiny-test", []int32{1, 2, 3, 4, 5, 6, 7, 8}, engine.GenerateOptions{MaxTokens: 6, Class: class}).Tokens() {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// each record reaches the telemetry before its signal: once the five
	// have, one snapshot holds them all
	for i := 0; i < 5; i++ {
		select {
		case <-seen:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 5 records reached the telemetry within 5 s", i)
		}
	}
	s := tel.Snapshot()
	got := map[string]link.RequestStats{}
	n := uint64(0)
	for _, r := range s.Requests {
		got[r.Class] = r
		n += r.Outcomes["completed"]
	}
	if n != 5 || got["interactive"].Model != "tiny-test" || got["batch"].Model != "tiny-test" {
		t.Fatalf("%d completed; groups %+v", n, got)
	}
	if r := got["interactive"]; r.TTFT.N == 0 || r.TTFT.P99 == nil || r.TPOT.N == 0 || r.OutputTokens == 0 {
		t.Fatalf("interactive group without latencies: %+v", r)
	}
	if len(s.KV) != 1 || s.KV[0].TotalBytes == 0 {
		t.Fatalf("kv %+v", s.KV)
	}
}

// signalObserver passes each record on to o, then signals seen.
type signalObserver struct {
	o    engine.Observer
	seen chan<- struct{}
}

func (s signalObserver) ObserveTimeline(r *engine.Record) {
	s.o.ObserveTimeline(r)
	select {
	case s.seen <- struct{}{}:
	default:
	}
}
