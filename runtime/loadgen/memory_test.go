package loadgen

import (
	"context"
	"iter"
	"os"
	"runtime"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// quickEngine answers every request at once with its max tokens, 1 ms
// after it arrives, reporting a record as the engine would: a pure
// stand-in (a backend) for measuring the harness's own memory.
type quickEngine struct {
	mu  sync.Mutex
	obs []engine.Observer
	id  uint64
}

func (q *quickEngine) generate(ctx context.Context, model string, prompt []int32, opts engine.GenerateOptions) iter.Seq2[engine.Token, error] {
	return func(yield func(engine.Token, error) bool) {
		q.mu.Lock()
		q.id++
		tl := metrics.NewTimeline(q.id, opts.Class.String(), time.Now(), opts.MaxTokens)
		obs := q.obs
		q.mu.Unlock()
		tl.Model, tl.PromptTokens = model, len(prompt)
		time.Sleep(time.Millisecond) // on purpose: the stand-in's time to first token
		tl.Admitted, tl.FirstScheduled = time.Now(), time.Now()
		for i := range opts.MaxTokens {
			tl.Token(time.Now())
			if !yield(engine.Token{ID: int32(i), Index: i, Time: time.Now()}, nil) {
				break
			}
		}
		tl.Finish(time.Now(), metrics.Completed)
		for _, o := range obs {
			o.ObserveTimeline(tl)
		}
	}
}

func (q *quickEngine) Observe(o engine.Observer) func() {
	q.mu.Lock()
	q.obs = append(q.obs, o)
	q.mu.Unlock()
	return func() {}
}

func (q *quickEngine) Stats() engine.Stats                   { return engine.Stats{} }
func (q *quickEngine) Scheduler() engine.SchedulerConfig     { return engine.SchedulerConfig{} }
func (q *quickEngine) Tokenizer(string) *tokenizer.Tokenizer { return nil }
func (q *quickEngine) Models() []engine.ModelInfo {
	return []engine.ModelInfo{{Name: "q", Kind: "decoder", Geometry: &bundle.Geometry{Vocab: 100}}}
}

// TestRunMemoryBounded: what a run keeps does not grow with its number of
// requests (the timelines go to the file, the figures are accumulated).
// Before, every request's timeline stayed in memory, ~2.9 KB each.
func TestRunMemoryBounded(t *testing.T) {
	retained := func(d time.Duration) (uint64, int) {
		spec := Spec{Name: "mem", Seed: 1, Input: Dist{Kind: "fixed", Value: 32}, Output: Dist{Kind: "fixed", Value: 32},
			Thresholds: []Threshold{{Metric: "failure_rate", Max: limit(0.1)}},
			Phases:     []Phase{{Name: "p", Kind: "custom", Duration: Duration(d), Arrival: Arrival{Mode: "closed", Concurrency: 4}}}}
		if err := spec.Resolve(); err != nil {
			t.Fatal(err)
		}
		res, err := run(context.Background(), &quickEngine{}, spec, Options{PowerFS: fstest.MapFS{}, SeriesPeriod: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer res.Close()
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		fi, err := os.Stat(res.TimelineFile)
		if err != nil || fi.Size() == 0 {
			t.Fatalf("timeline file: %v", err)
		}
		if rep := BuildReport(res); rep.Overall.Requests != res.Requests || len(rep.Requests) > maxRequestPoints || len(rep.Requests) < min(res.Requests, maxRequestPoints/2) {
			t.Fatalf("report: %d requests, %d points; run %d", rep.Overall.Requests, len(rep.Requests), res.Requests)
		}
		runtime.KeepAlive(res)
		return ms.HeapAlloc, res.Requests
	}
	h1, n1 := retained(400 * time.Millisecond)
	h2, n2 := retained(1600 * time.Millisecond)
	if n2 < n1+1000 {
		t.Skipf("too few requests to tell (%d then %d): the machine is too busy", n1, n2)
	}
	perReq := (float64(h2) - float64(h1)) / float64(n2-n1)
	t.Logf("%d then %d requests: heap %d then %d B, %.0f B per extra request", n1, n2, h1, h2, perReq)
	if perReq > 200 {
		t.Fatalf("the run keeps %.0f B per request: memory grows with the run's length", perReq)
	}
}
