package engine

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// BenchmarkPersistCost: serving throughput with the prefix cache persisted
// against without, alternated in one process. Two engines on the bench
// model (synthetic-110m int4-b32 unless EDGEINFER_BENCH_* say otherwise),
// both with the prefix cache on, one saving it every EDGEINFER_PERSIST_EVERY
// seconds (default 5: six times the default's rate). Each round is a closed
// loop of 4 clients, EDGEINFER_PERSIST_REQUESTS requests (default 12), prompts of one 512-token system prefix
// and a 64-token tail of their own, 64 tokens out; the metric is output
// tokens a second, and the ratio persisted ÷ not per round, median
// reported.
func BenchmarkPersistCost(b *testing.B) {
	bd := benchModel(b)
	vocab := bd.Manifest.Geometry.Vocab
	every := envFloat("EDGEINFER_PERSIST_EVERY", 5)
	reps := envInt("EDGEINFER_BENCH_REPS", 5)
	n := envInt("EDGEINFER_PERSIST_REQUESTS", 12)
	for b.Loop() {
		dir := b.TempDir()
		on := openPersistBench(b, bd, PrefixPersistConfig{Dir: dir, EverySeconds: every})
		off := openPersistBench(b, bd, PrefixPersistConfig{Disable: true})
		r := rand.New(rand.NewPCG(7, 7))
		system := randomPrompt(r, 512, vocab)
		persistRound(b, on, system, vocab, 1, n) // warm-up: shapes bound, prefix computed
		persistRound(b, off, system, vocab, 1, n)
		var ratios, onRates, offRates []float64
		for i := range reps {
			seed := uint64(100 + i)
			var a, c float64
			if i%2 == 0 {
				a, c = persistRound(b, on, system, vocab, seed, n), persistRound(b, off, system, vocab, seed, n)
			} else {
				c, a = persistRound(b, off, system, vocab, seed, n), persistRound(b, on, system, vocab, seed, n)
			}
			onRates, offRates, ratios = append(onRates, a), append(offRates, c), append(ratios, a/c)
		}
		saved := on.Stats().KV["bench"]
		files, _ := filepath.Glob(filepath.Join(dir, "*.kv"))
		closeBench(b, on)
		closeBench(b, off)
		b.Logf("RESULT persist every %.0f s: %.1f tok/s (rounds %.1f) vs off %.1f tok/s (rounds %.1f); ratio per round %.3f, median %.3f; %d blocks cached",
			every, median(onRates), onRates, median(offRates), offRates, ratios, median(ratios), saved.BlocksCached)
		b.Logf("saved file: %v", files)
		b.ReportMetric(median(ratios), "persisted/off")
	}
}

func openPersistBench(b *testing.B, bd *bundle.Bundle, pp PrefixPersistConfig) *Engine {
	b.Helper()
	e, err := Open(context.Background(), Config{
		Models:        []ModelSpec{{Dir: bd.Dir, Name: "bench"}},
		Session:       ort.Options{IntraOpThreads: benchThreads},
		KV:            KVOptions{BudgetBytes: 128 << 20},
		Scheduler:     SchedulerConfig{MaxBatch: 4, ChunkSize: 256},
		PrefixPersist: pp,
	})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// persistRound runs n requests from 4 closed-loop clients and returns the
// output tokens a second over the round.
func persistRound(b *testing.B, e *Engine, system []int32, vocab int, seed uint64, n int) float64 {
	b.Helper()
	r := rand.New(rand.NewPCG(seed, 9))
	prompts := make(chan []int32, n)
	for range n {
		prompts <- append(append([]int32(nil), system...), randomPrompt(r, 64, vocab)...)
	}
	close(prompts)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		tokens int
		errs   []error
	)
	start := time.Now()
	for range 4 {
		wg.Go(func() {
			for p := range prompts {
				times, err := stream(context.Background(), e, p, GenerateOptions{MaxTokens: 64})
				mu.Lock()
				tokens += len(times)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	return float64(tokens) / time.Since(start).Seconds()
}
