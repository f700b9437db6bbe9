package engine

import (
	"cmp"
	"os"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// BenchmarkDecodeRateMatMulKernel is BenchmarkDecodeRate's batch-1 and
// batch-8 decode rates, and the time to the first token of a 256-token
// prompt (one prefill chunk), for the int4-b32 bundle (EDGEINFER_BENCH_SCHEME:
// or int8) on com.microsoft.MatMulNBits and the same weights on edgeinfer's
// ai.edgeinfer.MatMulNBits (the default; llama.Options.PortableMatMul builds the other), both engines open
// at once and alternated round by round (EDGEINFER_BENCH_REPS, 5). It
// reports the medians and the median of the per-round ratios, kernel ÷
// portable (above 1 is faster for rates, below 1 for TTFT).
// EDGEINFER_BENCH_PRESET picks the model (synthetic-110m).
func BenchmarkDecodeRateMatMulKernel(b *testing.B) {
	orttest.Need(b)
	preset := cmp.Or(os.Getenv("EDGEINFER_BENCH_PRESET"), "synthetic-110m")
	reps := envInt("EDGEINFER_BENCH_REPS", 5)
	scheme := cmp.Or(os.Getenv("EDGEINFER_BENCH_SCHEME"), "int4-b32")
	bundles := map[bool]*bundle.Bundle{false: benchBundle(b, preset, scheme, false), true: benchBundle(b, preset, scheme, true)}
	vocab := bundles[false].Manifest.Geometry.Vocab
	for b.Loop() {
		engines := map[bool]*Engine{}
		for k, bd := range bundles {
			engines[k] = openBench(b, bd, SchedulerConfig{MaxBatch: 8, ChunkSize: 256})
			decodeRateLen(b, engines[k], 1, vocab, 1, 128, 16) // warm-up: binds the shapes
			decodeRateLen(b, engines[k], 8, vocab, 1, 128, 16)
			firstTokenMS(b, engines[k], vocab, 1)
		}
		type figures struct{ b1, b8, ttft []float64 }
		got := map[bool]*figures{false: {}, true: {}}
		var r1, r8, rt []float64
		for i := range reps {
			for _, k := range []bool{false, true} {
				f := got[k]
				f.b1 = append(f.b1, decodeRateLen(b, engines[k], 1, vocab, uint64(10+i), 128, 128))
				f.b8 = append(f.b8, decodeRateLen(b, engines[k], 8, vocab, uint64(20+i), 128, 128))
				f.ttft = append(f.ttft, firstTokenMS(b, engines[k], vocab, uint64(30+i)))
			}
			r1 = append(r1, got[true].b1[i]/got[false].b1[i])
			r8 = append(r8, got[true].b8[i]/got[false].b8[i])
			rt = append(rt, got[true].ttft[i]/got[false].ttft[i])
		}
		for _, e := range engines {
			closeBench(b, e)
		}
		for _, k := range []bool{false, true} {
			name := "portable (com.microsoft.MatMulNBits)"
			if k {
				name = "kernel (ai.edgeinfer.MatMulNBits)"
			}
			f := got[k]
			b.Logf("%s %s %s: b1 %.1f tok/s %.1f, b8 %.1f tok/s %.1f, TTFT(256) %.1f ms %.1f", preset, scheme, name,
				median(f.b1), f.b1, median(f.b8), f.b8, median(f.ttft), f.ttft)
		}
		b.Logf("kernel ÷ portable per round: b1 %.3f, b8 %.3f, TTFT %.3f", r1, r8, rt)
		b.ReportMetric(median(r1), "b1-kernel/portable")
		b.ReportMetric(median(r8), "b8-kernel/portable")
		b.ReportMetric(median(rt), "ttft-kernel/portable")
		b.ReportMetric(median(got[true].b1), "kernel-b1-tok/s")
		b.ReportMetric(median(got[false].b1), "portable-b1-tok/s")
	}
}

// firstTokenMS is the milliseconds to the first token of one 256-token prompt.
func firstTokenMS(b *testing.B, e *Engine, vocab int, seed uint64) float64 {
	b.Helper()
	return 256 / prefillRate(b, e, vocab, seed, 256) * 1e3
}
