package quant_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// TestProfileDecodeAndPrefill is where an int4-b32 decode step (batch 1,
// context 128) and a 256-token prefill chunk spend their time, per operator,
// from ONNX Runtime's profiler, for the portable graph
// (com.microsoft.MatMulNBits) and the one on edgeinfer's kernel
// (ai.edgeinfer.MatMulNBits): two intra-op threads, the model
// EDGEINFER_PROFILE_PRESET (synthetic-110m). For the matrix products it
// puts the bytes of weights a step reads beside a read bandwidth measured
// in the same run (orttest.ReadBandwidth on two threads), and a prefill
// chunk's multiply-adds beside the time they took, and a run's time
// without the profiler beside the profiled one. Opt-in: EDGEINFER_PROFILE=1
// (it builds two 110m bundles into the user cache once, where
// runtime/engine's BenchmarkDecodeRateMatMulKernel finds them).
func TestProfileDecodeAndPrefill(t *testing.T) {
	if os.Getenv("EDGEINFER_PROFILE") == "" {
		t.Skip("set EDGEINFER_PROFILE=1 to profile an int4 decode step and prefill chunk")
	}
	orttest.Need(t)
	ctx := context.Background()
	preset := os.Getenv("EDGEINFER_PROFILE_PRESET")
	if preset == "" {
		preset = "synthetic-110m"
	}
	cfg, src, err := llama.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	// int4 b32 weights of every projection and lm_head: 16 bytes and a
	// scale per 32, float32 for com.microsoft.MatMulNBits and float16 on
	// the kernel, which packs quant's float16-exact scales so
	// (MatMulNBits' parameter_size is its prepacked buffer, not what it
	// reads, so the bytes come from the shapes)
	q, kv := cfg.NumAttentionHeads*cfg.HeadDim, cfg.NumKeyValueHeads*cfg.HeadDim
	perLayer := (q+2*kv)*cfg.HiddenSize + cfg.HiddenSize*q + 3*cfg.IntermediateSize*cfg.HiddenSize
	weights := float64(cfg.NumHiddenLayers*perLayer + cfg.VocabSize*cfg.HiddenSize)
	const decodeSteps, prefillRuns, ctxLen, chunk = 30, 3, 128, 256
	for _, kernel := range []bool{false, true} {
		name := "portable"
		if kernel {
			name = "kernel"
		}
		// the bundle runtime/engine's BenchmarkDecodeRateMatMulKernel builds
		dir := filepath.Join(cache, "edgeinfer", "bench", fmt.Sprintf("%s-int4-b32%s-g%d", preset, map[bool]string{false: "", true: "-kernel"}[kernel], llama.GraphRevision))
		if _, err := bundle.Load(dir); err != nil {
			em, err := quant.NewEmitter("int4-b32")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := build.BuildDecoder(ctx, dir, build.DecoderSpec{Name: preset, Version: "1", Config: cfg,
				Weights: src, Options: llama.Options{Emitter: em, PortableMatMul: !kernel}, CreatedBy: "engine benchmark"}); err != nil {
				t.Fatal(err)
			}
		}
		for _, phase := range []struct {
			what string
			T    int
			ctx  int
			runs int
		}{{"decode step, batch 1, context 128", 1, ctxLen, decodeSteps}, {"prefill chunk of 256 tokens", chunk, 0, prefillRuns},
			// a 512-token prompt's second chunk (the engine's chunks are 256)
			{"prefill chunk of 256 tokens after 256", chunk, chunk, prefillRuns}} {
			bw := orttest.ReadBandwidth(2)
			in := pagedInputs(t, cfg, phase.T, phase.ctx)
			// The profiler's per-node events cost time of their own, a
			// large part of a profiled decode step: the same runs are timed
			// without it first, so the table's per-node times can be read
			// against the step's real length.
			unprofiled := runSession(t, filepath.Join(dir, llama.ModelFile), ort.Options{IntraOpThreads: 2}, in, phase.runs)
			slices.Sort(unprofiled)
			prefix := filepath.Join(t.TempDir(), "prof")
			runSession(t, filepath.Join(dir, llama.ModelFile), ort.Options{IntraOpThreads: 2, ProfilePrefix: prefix}, in, phase.runs)
			ort.CloseAll(in)
			files, _ := filepath.Glob(prefix + "*.json")
			if len(files) != 1 {
				t.Fatalf("profile files %v", files)
			}
			t.Logf("%s graph, %s (read bandwidth just before: %.1f GB/s, two threads over 256 MiB); without the profiler a run takes %.0f µs (median of %d), with it:\n%s",
				name, phase.what, bw/1e9, unprofiled[len(unprofiled)/2], len(unprofiled), profileTable(t, files[0], phase.runs, phase.T, weights, map[bool]float64{false: 20, true: 18}[kernel]/32, bw))
		}
	}
}

// runSession opens the model with opts and runs in runs+1 times, the first
// (shape binding) untimed, and returns the timed runs' wall µs; the
// session is closed before it returns (a profile is written then).
func runSession(t *testing.T, model string, opts ort.Options, in map[string]*ort.Tensor, runs int) []float64 {
	t.Helper()
	s, err := ort.NewSessionFromFile(context.Background(), model, opts)
	if err != nil {
		t.Fatal(err)
	}
	var us []float64
	for i := range runs + 1 {
		start := time.Now()
		out, err := s.Run(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			us = append(us, float64(time.Since(start).Microseconds()))
		}
		ort.CloseAll(out)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return us
}

// pagedInputs is one step of the paged contract for one row: T tokens after
// ctx cached ones, in a pool of blocks just large enough.
func pagedInputs(t *testing.T, c *llama.Config, T, ctx int) map[string]*ort.Tensor {
	t.Helper()
	const bs = llama.DefaultBlockSize
	blocks := (ctx+T+bs-1)/bs + 1
	in := map[string]*ort.Tensor{}
	add := func(name string, x *ort.Tensor, err error) {
		if err != nil {
			t.Fatal(err)
		}
		in[name] = x
	}
	ids, pos, table := make([]int64, T), make([]int64, T), make([]int64, blocks)
	for i := range T {
		ids[i], pos[i] = int64((i*131+7)%c.VocabSize), int64(ctx+i)
	}
	for i := range table {
		table[i] = int64(i)
	}
	x, err := ort.CopyTensor([]int64{1, int64(T)}, ids)
	add("input_ids", x, err)
	x, err = ort.CopyTensor([]int64{1, int64(T)}, pos)
	add("position_ids", x, err)
	x, err = ort.CopyTensor([]int64{1, int64(blocks)}, table)
	add("block_tables", x, err)
	x, err = ort.CopyTensor([]int64{1}, []int64{int64(ctx)})
	add("context_lens", x, err)
	x, err = ort.CopyTensor([]int64{1}, []int64{int64(T - 1)})
	add("last_index", x, err)
	// the kernel's attention writes the step's keys and values into the
	// pools: with the table in order, position p's slot is p
	x, err = ort.CopyTensor([]int64{1, int64(T)}, pos)
	add("slots", x, err)
	pool := make([]float32, c.NumKeyValueHeads*blocks*bs*c.HeadDim)
	for i := range pool {
		pool[i] = float32(math.Sin(float64(i))) / 4
	}
	shape := []int64{int64(c.NumKeyValueHeads), int64(blocks), bs, int64(c.HeadDim)}
	for l := range c.NumHiddenLayers {
		for _, k := range []string{"key_cache.", "value_cache."} {
			x, err := ort.CopyTensor(shape, pool)
			add(k+strconv.Itoa(l), x, err)
		}
	}
	return in
}

// profileTable sums ONNX Runtime's per-node kernel times by operator over
// the last runs runs of a trace and prints them per run, with, for the
// int4 matrix products, the bytes of their weights (bytesPerWeight each) against the
// bandwidth bw and, for T > 1, the multiply-adds per second.
func profileTable(t *testing.T, path string, runs, T int, weights, bytesPerWeight, bw float64) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var events []struct {
		Cat  string  `json:"cat"`
		Name string  `json:"name"`
		Dur  float64 `json:"dur"`
		Ts   float64 `json:"ts"`
		Args struct {
			Op string `json:"op_name"`
		} `json:"args"`
	}
	if err := json.Unmarshal(raw, &events); err != nil {
		t.Fatal(err)
	}
	// the runs' model_run events, to drop what the first run did
	var starts []float64
	for _, e := range events {
		if e.Name == "model_run" {
			starts = append(starts, e.Ts)
		}
	}
	slices.Sort(starts)
	if len(starts) < runs+1 {
		t.Fatalf("%d model_run events, want %d", len(starts), runs+1)
	}
	from := starts[len(starts)-runs]
	type row struct {
		op        string
		us, bytes float64
		nodes     int
	}
	rows := map[string]*row{}
	var total, runTime float64
	for _, e := range events {
		if e.Ts < from {
			continue
		}
		if e.Name == "model_run" {
			runTime += e.Dur
		}
		if e.Cat != "Node" || !strings.HasSuffix(e.Name, "_kernel_time") {
			continue
		}
		r := rows[e.Args.Op]
		if r == nil {
			r = &row{op: e.Args.Op}
			rows[e.Args.Op] = r
		}
		r.us += e.Dur
		r.nodes++
		total += e.Dur
	}
	var list []*row
	for _, r := range rows {
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].us > list[j].us })
	var b strings.Builder
	n := float64(runs)
	fmt.Fprintf(&b, "  run %.0f µs (nodes %.0f µs)\n", runTime/n, total/n)
	fmt.Fprintf(&b, "  %-22s %6s %10s %6s  %s\n", "operator", "nodes", "µs/run", "share", "limit")
	for _, r := range list {
		limit := ""
		if r.op == "MatMulNBits" {
			bytes := weights * bytesPerWeight
			floor := bytes / bw * 1e6
			limit = fmt.Sprintf("weights %.1f MB/run ÷ bandwidth = %.0f µs (%.0f%% of the time)", bytes/1e6, floor, 100*floor/(r.us/n))
			if T > 1 {
				limit += fmt.Sprintf("; %.1f GMAC/s", weights*float64(T)/(r.us/n*1e3))
			}
		}
		fmt.Fprintf(&b, "  %-22s %6d %10.0f %5.1f%%  %s\n", r.op, r.nodes/runs, r.us/n, 100*r.us/total, limit)
	}
	return b.String()
}
