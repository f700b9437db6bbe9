package quant_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

func dirBytes(t testing.TB, dir string) int64 {
	var n int64
	for _, f := range []string{"model.onnx", "model.onnx.data"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
			n += st.Size()
		}
	}
	return n
}

func maxRSSMiB() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024
}

// BenchmarkSynthetic110m builds synthetic-110m in fp32, quantises it with
// the graph pass to int4-b32 and int8 (time, peak RSS, bytes), and
// measures batch-1 greedy decode through engine.Scorer.Greedy for each, 2
// threads, in one run so the ratios are comparable; it reports each
// scheme's size ÷ fp32 and tokens/s as metrics (minutes: one iteration is
// the run).
//
//	go test ./quant -run XX -bench Synthetic110m -benchtime 1x
func BenchmarkSynthetic110m(b *testing.B) {
	t := b
	orttest.Need(t)
	ctx := context.Background()
	cfg, src, err := llama.Preset("synthetic-110m")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	ref, err := build.BuildDecoder(ctx, filepath.Join(root, "fp32"), build.DecoderSpec{Name: "synthetic-110m", Version: "1", Config: cfg, Weights: src})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fp32 built; peak rss so far %.0f MiB", maxRSSMiB())
	dirs := map[string]*bundle.Bundle{"fp32": ref}
	for _, s := range []string{"int4-b32", "int8"} {
		sc, _ := quant.ParseScheme(s)
		start := time.Now()
		b, side, err := quant.QuantizeBundle(ctx, ref.Dir, filepath.Join(root, s), quant.Options{Scheme: sc})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: quantised in %.1f s, peak rss so far %.0f MiB, weights %d → %d B", s, time.Since(start).Seconds(), maxRSSMiB(), side.BytesBefore, side.BytesAfter)
		dirs[s] = b
	}
	prompt := make([]int32, 16)
	for i := range prompt {
		prompt[i] = int32(100 + i)
	}
	fpBytes := dirBytes(t, ref.Dir)
	for _, s := range []string{"fp32", "int8", "int4-b32"} {
		m, err := engine.OpenScorer(ctx, engine.ModelSpec{Dir: dirs[s].Dir}, engine.ScorerOptions{Session: ort.Options{IntraOpThreads: 2}})
		if err != nil {
			t.Fatal(err)
		}
		const n = 64
		got := 0
		start := time.Now()
		var first time.Time
		for _, err := range m.Greedy(ctx, prompt, n) {
			if err != nil {
				t.Fatal(err)
			}
			if got == 0 {
				first = time.Now()
			}
			got++
		}
		el := time.Since(first)
		_ = start
		size := dirBytes(t, dirs[s].Dir)
		t.Logf("%-8s model %d B (%.3f× fp32); batch 1 decode %.1f tok/s (%d tokens)", s, size, float64(size)/float64(fpBytes), float64(got-1)/el.Seconds(), got)
		t.ReportMetric(float64(size)/float64(fpBytes), s+"_size/fp32")
		t.ReportMetric(float64(got-1)/el.Seconds(), s+"_tok/s")
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
