package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// BenchmarkOpenFromStore compares a session-ready open of a model from the
// offline store (by name: resolved, materialised once per version, digests
// re-checked) with an open of the same bundle directory, alternating the two
// and taking medians. The first open from the store, which exports the
// version, is reported separately. EDGEINFER_BENCH_BUNDLE names the bundle
// (default: the tiny-test preset).
//
//	EDGEINFER_BENCH_BUNDLE=DIR go test ./runtime/engine/ -run '^$' -bench OpenFromStore -benchtime 1x
func BenchmarkOpenFromStore(b *testing.B) {
	orttest.Need(b)
	dir := os.Getenv("EDGEINFER_BENCH_BUNDLE")
	if dir == "" {
		dir = buildPreset(b, "tiny-test")
	}
	ctx := context.Background()
	db := filepath.Join(b.TempDir(), "models.db")
	st, err := store.Open(ctx, db, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ref, err := st.Import(ctx, dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	open := func(cfg Config) time.Duration {
		cfg.Session = ort.Options{IntraOpThreads: 2}
		start := time.Now()
		e, err := Open(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		if err := e.Close(ctx); err != nil {
			b.Fatal(err)
		}
		return d
	}
	fromStore := Config{Store: db, Models: []ModelSpec{{Ref: ref.Name}}}
	fromDir := Config{Models: []ModelSpec{{Dir: dir}}}
	first := open(fromStore)
	var s, d []time.Duration
	for range 5 {
		s = append(s, open(fromStore))
		d = append(d, open(fromDir))
	}
	ms, md := quantile(s, 0.5), quantile(d, 0.5)
	b.ReportMetric(float64(first)/1e6, "first-store-ms")
	b.ReportMetric(float64(ms)/1e6, "store-ms")
	b.ReportMetric(float64(md)/1e6, "dir-ms")
	b.ReportMetric(float64(ms)/float64(md), "store-x")
	b.Logf("%s: first open from the store (export) %v; then median store %v vs directory %v", ref, first, ms, md)
}
