package main

import (
	"context"
	"image"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

// BenchmarkFrame: one BlazeFace frame end to end, the 1024x708 JPEG
// decoded (at 1/8 of its size: prepost.PrepareImage), resized and
// normalised, the model run, anchors decoded and merged: through the
// bundle (sandboxed pre and post plugins) and as the same pipeline in
// native Go (package prepost), alternated per round with
// one ONNX Runtime session. It reports each pipeline's median, the median
// of the per-round ratio bundle/native, and the bundle's median stages
// (pre-us below model-us is the second goal).
func BenchmarkFrame(b *testing.B) {
	model, photo, dir := fixture(b)
	jpg, err := os.ReadFile(photo)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	bd, err := bundle.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	pl, err := plugin.OpenPipeline(ctx, bd, plugin.Config{MaxInstances: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer pl.Close(ctx)
	s, err := ort.NewSessionFromFile(ctx, model, ort.Options{IntraOpThreads: 1})
	if err != nil {
		b.Skipf("ONNX Runtime unavailable (run make setup): %v", err)
	}
	defer s.Close()

	var stages [3]time.Duration
	viaBundle := func() {
		t0 := time.Now()
		feeds, pass, err := pl.Pre(ctx, []abi.Tensor{abi.Bytes("image", jpg)}, []string{"input:0"})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		outs, err := runModel(ctx, s, feeds[0])
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := pl.Post(ctx, outs, pass); err != nil {
			b.Fatal(err)
		}
		stages = [3]time.Duration{t1.Sub(t0), t2.Sub(t1), time.Since(t2)}
	}
	native := func() {
		p, err := prepost.PrepareImage(ctx, jpg, 1<<40, 0, image.Rectangle{}, prepost.BlazeFace)
		if err != nil {
			b.Fatal(err)
		}
		outs, err := runModel(ctx, s, abi.F32("input:0", []int64{1, int64(p.Height), int64(p.Width), 3}, p.Data))
		if err != nil {
			b.Fatal(err)
		}
		var d [4][]float32
		for i, n := range []string{"Identity:0", "Identity_1:0", "Identity_2:0", "Identity_3:0"} {
			t, _ := abi.Find(outs, n)
			d[i], _ = t.Float32s()
		}
		prepost.DecodeBlazeFace(append(slices.Clone(d[0]), d[1]...), append(slices.Clone(d[2]), d[3]...), 128, 0.5)
	}
	viaBundle() // warm: instances, arenas
	native()
	var tb, tn, ratio []float64
	var pre, mdl, post []float64
	timed := func(f func()) float64 {
		start := time.Now()
		f()
		return float64(time.Since(start))
	}
	round := 0
	for b.Loop() {
		var viaB, viaN float64
		if round%2 == 0 { // alternate which goes first
			viaB, viaN = timed(viaBundle), timed(native)
		} else {
			viaN, viaB = timed(native), timed(viaBundle)
		}
		round++
		tb, tn, ratio = append(tb, viaB), append(tn, viaN), append(ratio, viaB/viaN)
		pre, mdl, post = append(pre, float64(stages[0])), append(mdl, float64(stages[1])), append(post, float64(stages[2]))
	}
	b.ReportMetric(med(tb)/1e3, "bundle-us")
	b.ReportMetric(med(tn)/1e3, "native-us")
	b.ReportMetric(med(ratio), "bundle/native")
	b.ReportMetric(med(pre)/1e3, "pre-us")
	b.ReportMetric(med(mdl)/1e3, "model-us")
	b.ReportMetric(med(post)/1e3, "post-us")
	b.ReportMetric(0, "ns/op")
}

func med(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
