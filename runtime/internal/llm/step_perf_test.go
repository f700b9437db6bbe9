package llm

import (
	"context"
	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// The mixed-step measurements behind the engine's priority-isolation and
// goodput figures: what a step holding decode rows and one prefill chunk
// costs against its two runs alone, what a prefill chunk of a length never
// run before costs against one of a length already run, and both with the
// intra-op threads spinning or not. Opt-in (EDGEINFER_BENCH=1):
//
//	EDGEINFER_BENCH=1 go test ./runtime/llm/ -run '^$' -bench StepPerf -benchtime 1x
//
// EDGEINFER_PERF_MODEL=110m times synthetic-110m instead of the 4-layer
// "small" decoder of the engine's priority test.
//
// Measured on the 2-core host: a mixed step costs its two runs and no more
// (excess -0.6..+0.4 ms on small, negative on 110m), and a prefill of a
// length never run before costs what the same length run again does (small
// 10.7 vs 11.2 ms, 110m minima 154-170 vs 153-163 ms), so new shapes cost
// ONNX Runtime no visible re-planning and bucketing chunk lengths would buy
// nothing. Spinning is load-dependent: at load 4-5 it slowed the batch-8
// decode 1.1-2.1x and the 96-token prefill 1.5-1.6x; idle, it was within
// noise here and 13-16 % faster in the engine's BenchmarkBatchScaling.

// perfBundle builds the engine test's small decoder, or returns the cached
// synthetic-110m paged bundle.
func perfBundle(b *testing.B) *bundle.Bundle {
	b.Helper()
	if os.Getenv("EDGEINFER_PERF_MODEL") == "110m" {
		return benchBundle(b, llama.Options{Contract: llama.ContractPaged})
	}
	cfg, _, err := llama.Preset("tiny-test")
	if err != nil {
		b.Fatal(err)
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = 256, 1024, 4
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 4, 2, 64
	bd, err := build.BuildDecoder(context.Background(), b.TempDir(), build.DecoderSpec{
		Name: "small", Version: "1", Config: cfg, Weights: llama.SyntheticSource{C: cfg, Seed: 5}, CreatedBy: "llm perf",
	})
	if err != nil {
		b.Fatal(err)
	}
	return bd
}

func perfModel(b *testing.B, bd *bundle.Bundle, noSpin bool) *Model {
	b.Helper()
	m, err := Load(context.Background(), bd, Options{
		Session:  ort.Options{IntraOpThreads: 2, NoSpinning: noSpin},
		KV:       kvcache.Options{BudgetBytes: 256 << 20, DisablePrefixCache: true},
		MaxBatch: 8,
		MaxChunk: 256,
	})
	if err != nil {
		b.Fatal(err)
	}
	clear(m.eos)
	return m
}

// prefillOnce admits a fresh sequence of T tokens, times its one-chunk
// prefill step (with the decode rows of d beside it when d is not nil) and
// releases it.
func prefillOnce(b *testing.B, m *Model, d *decodeRows, id sched.SeqID, T int) time.Duration {
	b.Helper()
	p := prompt(T+int(id)%7, m.geom.Vocab)[int(id)%7:]
	if _, err := m.Admit(context.Background(), sched.Sequence{ID: id, Tokens: p, PromptLen: T}); err != nil {
		b.Fatal(err)
	}
	defer m.Release(id)
	batch := &sched.Batch{Prefill: []sched.PrefillChunk{{Seq: id, Tokens: p, Pos: 0, Last: true}}}
	if d != nil {
		return d.stepWith(b, batch)
	}
	start := time.Now()
	if _, err := m.Step(context.Background(), batch); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// stepWith runs the rows' decode with extra prefill chunks in one step.
func (d *decodeRows) stepWith(b *testing.B, batch *sched.Batch) time.Duration {
	b.Helper()
	batch.Decode = d.rows
	start := time.Now()
	res, err := d.m.Step(context.Background(), batch)
	el := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range d.rows {
		if err := d.m.Extend(r.Seq, 1); err != nil {
			b.Fatal(err)
		}
		d.rows[i] = sched.DecodeRow{Seq: r.Seq, Token: res.Tokens[i].Token, Pos: r.Pos + 1}
	}
	return el
}

func BenchmarkStepPerf(b *testing.B) {
	needBench(b)
	bd := perfBundle(b)
	rounds := 24
	if os.Getenv("EDGEINFER_PERF_MODEL") == "110m" {
		rounds = 8
	}
	for b.Loop() {
		for _, noSpin := range []bool{false, true, false, true} {
			m := perfModel(b, bd, noSpin)
			d := newDecodeRows(b, m, 8, 128)
			id := sched.SeqID(1000)
			// warm the fixed shapes
			for range 3 {
				d.step(b)
				id++
				prefillOnce(b, m, nil, id, 96)
				id++
				prefillOnce(b, m, d, id, 96)
			}
			var dec, pre, mix, fresh, again []float64
			for i := range rounds {
				if i%stepsPerReset == 0 {
					d.reset(b, 8, 128)
					d.step(b)
				}
				dec = append(dec, ms(d.step(b)))
				id++
				pre = append(pre, ms(prefillOnce(b, m, nil, id, 96)))
				id++
				mix = append(mix, ms(prefillOnce(b, m, d, id, 96)))
				// a length never run before, then the same length again
				T := 97 + i
				id++
				fresh = append(fresh, ms(prefillOnce(b, m, nil, id, T)))
				id++
				again = append(again, ms(prefillOnce(b, m, nil, id, T)))
			}
			d.release()
			_ = m.Close()
			b.Logf("spin=%v: decode8 %.2f ms, prefill96 %.2f ms, mixed %.2f ms (excess %.2f ms); prefill of a new length %.2f ms, same length again %.2f ms (min %.2f / %.2f)",
				!noSpin, median(dec), median(pre), median(mix), median(mix)-median(dec)-median(pre),
				median(fresh), median(again), slices.Min(fresh), slices.Min(again))
		}
	}
}
