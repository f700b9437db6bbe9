package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// llama3Bundle is synthetic-110m's shape (int4, block 32) with Llama 3's
// vocabulary and tokenizer (128,256 tokens, from platforms/tokenizers/
// fetch.sh's cache), built once into the user cache: a 128k-vocabulary
// decoder whose step is as short as such a model's gets on this class of
// device, so a mask's share of it is an upper bound for larger ones.
func llama3Bundle(b *testing.B) *bundle.Bundle {
	b.Helper()
	orttest.Need(b)
	cache, err := os.UserCacheDir()
	if err != nil {
		b.Fatal(err)
	}
	tok := filepath.Join(cache, "edgeinfer", "tokenizers", "llama3", "tokenizer.json")
	if d := os.Getenv("EDGEINFER_TOKENIZERS"); d != "" {
		tok = filepath.Join(d, "llama3", "tokenizer.json")
	}
	if _, err := os.Stat(tok); err != nil {
		b.Skipf("Llama 3's tokenizer is not at %s (platforms/tokenizers/fetch.sh)", tok)
	}
	dir := filepath.Join(cache, "edgeinfer", "bench", fmt.Sprintf("synthetic-110m-llama3-int4-b32-kernel-g%d", llama.GraphRevision))
	if bd, err := bundle.Load(dir); err == nil {
		return bd
	}
	_ = os.RemoveAll(dir)
	cfg, src, err := llama.Preset("synthetic-110m")
	if err != nil {
		b.Fatal(err)
	}
	cfg.VocabSize = 128256
	cfg.BOSTokenID, cfg.EOSTokenID = llama.TokenIDs{128000}, llama.TokenIDs{128001, 128009}
	em, err := quant.NewEmitter("int4-b32")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	bd, err := build.BuildDecoder(context.Background(), dir, build.DecoderSpec{Name: "synthetic-110m-llama3", Version: "1", Config: cfg, Weights: src,
		Options: llama.Options{Emitter: em}, Tokenizer: tok, CreatedBy: "engine benchmark"})
	if err != nil {
		_ = os.RemoveAll(dir)
		b.Fatal(err)
	}
	b.Logf("built %s in %v", dir, time.Since(start).Round(time.Second))
	return bd
}

// benchJSONSchema is a typical structured-output schema (as the grammar
// package's BenchmarkMask uses).
const benchJSONSchema = `{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"name":{"type":"string"},"price":{"type":"number","minimum":0},` +
	`"qty":{"type":"integer","minimum":0,"maximum":1000},"status":{"type":"string","enum":["ok","late","lost"]},"at":{"type":"string","format":"date-time"},` +
	`"items":{"type":"array","maxItems":5,"items":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},"n":{"type":"integer"}},"required":["sku","n"],"additionalProperties":false}},` +
	`"note":{"type":["string","null"]}},"required":["id","name","price","qty","status","at","items","note"],"additionalProperties":false}`

// BenchmarkConstrainedTPOT is the time per output token of free and
// json_schema-constrained generation at batch 1 and 8 on a 128k
// vocabulary (llama3Bundle), alternated in one run (EDGEINFER_BENCH_REPS
// rounds, 3 by default, medians reported), 48 tokens per stream at
// temperature 1, top-k 40: the mask's cost is the difference. The
// schema's masks are warm (a first generation visits its states); the
// grammar's compile time is BenchmarkCompileSchema's in
// runtime/internal/grammar.
func BenchmarkConstrainedTPOT(b *testing.B) {
	bd := llama3Bundle(b)
	reps := envInt("EDGEINFER_BENCH_REPS", 3)
	for b.Loop() {
		e, err := Open(context.Background(), Config{
			Models:    []ModelSpec{{Dir: bd.Dir, Name: "bench"}},
			Session:   ort.Options{IntraOpThreads: benchThreads},
			KV:        KVOptions{BudgetBytes: 256 << 20, DisablePrefixCache: true},
			Scheduler: SchedulerConfig{MaxBatch: 8, ChunkSize: 256},
		})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		c, err := JSONSchema([]byte(benchJSONSchema))
		if err != nil {
			b.Fatal(err)
		}
		compile := time.Since(t0)
		run := func(batch int, con *Constraint, seed uint64) time.Duration {
			var mu sync.Mutex
			var tpots []float64
			var wg sync.WaitGroup
			for i := range batch {
				wg.Go(func() {
					s := e.Generate(context.Background(), "bench", fmt.Sprintf("Record %d of the warehouse log:", i),
						GenerateOptions{MaxTokens: 48, Constraint: con, Sampling: &Sampling{Temperature: 1, TopK: 40, Seed: seed + uint64(i)}})
					_, sum, err := drain(s)
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					tpots = append(tpots, float64(sum.TPOT))
					mu.Unlock()
				})
			}
			wg.Wait()
			return time.Duration(median(tpots))
		}
		run(1, nil, 1) // warm-up: binds the shapes
		run(8, nil, 1)
		t0 = time.Now()
		run(1, c, 1) // the first constrained generation: the vocabulary indexed, masks computed at each state's first visit
		first := time.Since(t0)
		for _, batch := range []int{1, 8} {
			var free, con []float64
			for r := range reps {
				free = append(free, float64(run(batch, nil, uint64(100*r))))
				con = append(con, float64(run(batch, c, uint64(100*r))))
			}
			f, k := time.Duration(median(free)), time.Duration(median(con))
			b.Logf("batch %d: TPOT free %v, constrained %v (%+.1f %%); rounds free %v constrained %v", batch, f.Round(time.Microsecond), k.Round(time.Microsecond),
				100*(float64(k)/float64(f)-1), free, con)
			b.ReportMetric(float64(f.Microseconds())/1e3, fmt.Sprintf("b%d-free-ms", batch))
			b.ReportMetric(float64(k.Microseconds())/1e3, fmt.Sprintf("b%d-json-ms", batch))
		}
		b.Logf("schema compiled in %v; the first constrained generation (48 tokens: the vocabulary indexed, masks computed on first visits) took %v", compile, first.Round(time.Millisecond))
		closeBench(b, e)
	}
}
