package link

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// recorder keeps the TTFTs of one round.
type recorder struct {
	mu   sync.Mutex
	ttft *metrics.Histogram
	tel  *Telemetry    // nil: telemetry off
	left int           // records still to come this round
	all  chan struct{} // closed once left reaches 0 (the round's last record is observed)
}

func (r *recorder) ObserveTimeline(t *engine.Record) {
	r.mu.Lock()
	if d, ok := t.TTFT(); ok {
		r.ttft.Record(float64(d) / 1e6)
	}
	tel := r.tel
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.left--; r.left == 0 {
			close(r.all)
		}
		r.mu.Unlock()
	}()
	if tel != nil {
		times := make([]time.Time, len(t.Tokens))
		for i, d := range t.Tokens {
			times[i] = t.Arrived.Add(d)
		}
		tel.Observe(Record{Model: t.Model, Class: t.Class, Outcome: string(t.Outcome), Arrived: t.Arrived,
			FirstScheduled: t.FirstScheduled, FirstToken: t.FirstToken, Finished: t.Finished, TokenTimes: times, MetSLO: t.MetSLO()})
	}
}

// BenchmarkTelemetryCost measures the engine's TTFT p99 under load (the
// tiny-test decoder, 4 concurrent streams of 16 tokens) with telemetry off
// and with telemetry on (every record observed, a snapshot every second
// through the outbox to a real mosquitto), alternated for 5 rounds of 1,200 requests each;
// it reports the ratio of the medians. Run with -benchtime=1x.
func BenchmarkTelemetryCost(b *testing.B) {
	orttest.Need(b)
	cfg, src, err := llama.Preset("tiny-test")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if _, err := build.BuildDecoder(context.Background(), dir, build.DecoderSpec{Name: "tiny-test", Version: "1", Config: cfg, Weights: src}); err != nil {
		b.Fatal(err)
	}
	rec := &recorder{}
	ecfg := engine.Config{Models: []engine.ModelSpec{{Dir: dir}}, Observers: []engine.Observer{rec}}
	ecfg.Session.IntraOpThreads = 1
	ctx := context.Background()
	e, err := engine.Open(ctx, ecfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)

	br := mosquittotest.Start(b, mosquittotest.Options{})
	l, err := Open(ctx, testConfig(br), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	st := openStoreB(b, filepath.Join(b.TempDir(), "store.db"))
	defer st.Close()
	ob, err := OpenOutbox(ctx, st, l, OutboxConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer ob.Close()

	prompt := make([]int32, 32)
	for i := range prompt {
		prompt[i] = int32(i*7%200 + 1)
	}
	round := func(on bool) float64 {
		var tel *Telemetry
		if on {
			tel = NewTelemetry(l, ob, TelemetryConfig{Interval: time.Second}, Sources{Engine: func() EngineStats { return EngineStats{Preemptions: e.Stats().Scheduler.Preemptions} }})
			tel.Start()
			defer tel.Close()
		}
		rec.mu.Lock()
		rec.ttft, rec.tel = metrics.NewHistogram(0), tel
		rec.left, rec.all = 4*300, make(chan struct{})
		all := rec.all
		rec.mu.Unlock()
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 300; i++ {
					for _, err := range e.GenerateTokens(ctx, "tiny-test", prompt, engine.GenerateOptions{MaxTokens: 16}).Tokens() {
						if err != nil {
							b.Error(err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		select { // the last records reach the observers
		case <-all:
		case <-time.After(30 * time.Second):
			b.Fatal("the round's 1,200 records did not all reach the observer within 30 s")
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		p, _ := rec.ttft.Quantile(0.99)
		return p
	}
	round(false) // warm-up
	var off, on []float64
	for r := 0; r < 5; r++ {
		off = append(off, round(false))
		on = append(on, round(true))
	}
	b.Logf("TTFT p99 ms, telemetry off: %v; on (1 s snapshots): %v; telemetry published: %d", rounded2(off), rounded2(on), ob.Stats().Acked)
	b.ReportMetric(median(off), "ttft_p99_off_ms")
	b.ReportMetric(median(on), "ttft_p99_on_ms")
	b.ReportMetric(median(on)/median(off), "ratio")
}

func rounded2(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(int(x*100)) / 100
	}
	return out
}
