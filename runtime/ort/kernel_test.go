package ort

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
)

// The kernels' variant tests: every variant this CPU runs, against the
// plain-Go references and against each other. `go test ./runtime/ort -run
// Kernel -v` lists which variants ran and which the CPU could not.

// forEachVariant runs f once per variant in names, switched in with use,
// restoring the one picked at load when it returns.
func forEachVariant(t *testing.T, kind string, compiled, runs []string, current string,
	use func(string) error, f func(t *testing.T, variant string)) {
	t.Helper()
	for _, v := range compiled {
		if !slices.Contains(runs, v) {
			t.Logf("%s variant %s: not run, this CPU lacks its instructions", kind, v)
		}
	}
	t.Logf("%s variants run here: %v (picked at load: %s)", kind, runs, current)
	defer func() {
		if err := use(current); err != nil {
			t.Error(err)
		}
	}()
	for _, v := range runs {
		if err := use(v); err != nil {
			t.Fatal(err)
		}
		t.Run(v, func(t *testing.T) { f(t, v) })
	}
}

// TestKernelAttentionVariants: each attention variant against the float64
// reference and against the generic one, on cases that reach every loop:
// head sizes that are and are not multiples of 16 (the hand-written AVX2
// loops and the compiled ones), grouped heads with an odd group (3 rows
// for the value loop), prefill over a past, and int8 and float16 pools,
// blocks among them too large to widen at once.
func TestKernelAttentionVariants(t *testing.T) {
	needLib(t)
	cases := map[string]pagedCase{
		"decode, D 64, 3 heads per KV head": raggedDecode,
		"prefill, D 32, pairs": {B: 1, T: 9, Hq: 8, Hkv: 4, D: 32, N: 6, bs: 8, M: 3,
			ctx: []int64{13}, table: []int64{4, 0, 2}},
		"prefill, D 20": {B: 1, T: 11, Hq: 4, Hkv: 2, D: 20, N: 8, bs: 4, M: 3,
			ctx: []int64{10}, table: []int64{5, 1, 6}},
		"prefill, D 48, MHA, no past": {B: 2, T: 6, Hq: 2, Hkv: 2, D: 48, N: 2, bs: 4, M: 1,
			ctx: []int64{0, 0}, table: []int64{0, 1}},
		"int8 pools, D 64": {B: 2, T: 3, Hq: 6, Hkv: 2, D: 64, N: 10, bs: 8, M: 3, int8: true,
			ctx: []int64{21, 9}, table: []int64{4, 8, 1, 7, 0, 0}},
		"int8 pools, decode, blocks of 16, 3 heads per KV head": {B: 2, T: 1, Hq: 12, Hkv: 4, D: 64, N: 12, bs: 16, M: 3, int8: true,
			ctx: []int64{37, 16}, table: []int64{7, 2, 10, 5, 0, 0}},
		"int8 pools, D 24": {B: 1, T: 2, Hq: 2, Hkv: 1, D: 24, N: 4, bs: 4, M: 3, int8: true,
			ctx: []int64{10}, table: []int64{3, 1, 2}},
		// the prefill path (T ≥ 8): gathered keys, rows of different pasts
		"prefill path, D 64, 3 heads per KV head, two rows": {B: 2, T: 13, Hq: 6, Hkv: 2, D: 64, N: 12, bs: 4, M: 6,
			ctx: []int64{7, 0}, table: []int64{11, 2, 5, 0, 0, 0, 8, 1, 9, 3, 4, 6}},
		"prefill path, D 128, 4 heads per KV head, no past": {B: 1, T: 21, Hq: 8, Hkv: 2, D: 128, N: 6, bs: 8, M: 3,
			ctx: []int64{0}, table: []int64{1, 4, 2}},
		"prefill path, int8 pools, D 80": {B: 1, T: 8, Hq: 4, Hkv: 2, D: 80, N: 9, bs: 4, M: 7, int8: true,
			ctx: []int64{19}, table: []int64{8, 3, 6, 1, 0, 5, 7}},
		"float16 pools, decode, blocks of 16": {B: 2, T: 1, Hq: 12, Hkv: 4, D: 64, N: 12, bs: 16, M: 3, f16: true,
			ctx: []int64{37, 16}, table: []int64{7, 2, 10, 5, 0, 0}},
		// decode with four and eight query heads per KV head: the AVX-512
		// loops' full tiles of four rows, and D past their 64 columns
		"float16 pools, decode, 4 heads per KV head, D 128": {B: 2, T: 1, Hq: 8, Hkv: 2, D: 128, N: 12, bs: 16, M: 3, f16: true,
			ctx: []int64{41, 7}, table: []int64{3, 9, 1, 6, 0, 0}},
		"decode, 8 heads per KV head, D 80, two tokens": {B: 1, T: 2, Hq: 16, Hkv: 2, D: 80, N: 6, bs: 8, M: 4,
			ctx: []int64{27}, table: []int64{5, 0, 2, 4}},
		"float16 pools, D 24": {B: 1, T: 2, Hq: 2, Hkv: 1, D: 24, N: 4, bs: 4, M: 3, f16: true,
			ctx: []int64{10}, table: []int64{3, 1, 2}},
		// blocks of more than EI_WIDE_MAX elements: widened in chunks of slots
		"int8 pools, blocks of 64, D 128": {B: 1, T: 1, Hq: 2, Hkv: 1, D: 128, N: 3, bs: 64, M: 2, int8: true,
			ctx: []int64{100}, table: []int64{2, 0}},
		"float16 pools, blocks of 64, D 80": {B: 1, T: 2, Hq: 4, Hkv: 2, D: 80, N: 3, bs: 64, M: 2, f16: true,
			ctx: []int64{90}, table: []int64{1, 2}},
		"prefill path, float16 pools, D 64": {B: 1, T: 9, Hq: 6, Hkv: 2, D: 64, N: 9, bs: 4, M: 7, f16: true,
			ctx: []int64{19}, table: []int64{8, 3, 6, 1, 0, 5, 7}},
	}
	ctx := context.Background()
	type prepared struct {
		c    pagedCase
		s    *Session
		d    pagedData
		want []float32
		base []float32 // the first variant's output
	}
	var all []*prepared
	for name, c := range cases {
		s, err := NewSession(ctx, pagedModel(c), Options{IntraOpThreads: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		d := newPagedData(c, rand.New(rand.NewPCG(11, uint64(len(name)))))
		all = append(all, &prepared{c: c, s: s, d: d, want: c.reference(d)})
	}
	forEachVariant(t, "attention", attentionCompiled(), attentionVariants(), attentionVariant(),
		useAttentionVariant, func(t *testing.T, v string) {
			worstRef, worstBase := 0.0, 0.0
			for _, p := range all {
				got, err := p.c.run(t, p.s, p.d)
				if err != nil {
					t.Fatal(err)
				}
				if p.base == nil {
					p.base = got
				}
				worstRef = max(worstRef, maxAbsDiff(got, p.want))
				worstBase = max(worstBase, maxAbsDiff(got, p.base))
			}
			t.Logf("max |%s − reference| = %.2g, |%s − first variant| = %.2g", v, worstRef, v, worstBase)
			if worstRef > 1e-5 || worstBase > 1e-5 {
				t.Errorf("%s: max difference %g from the reference, %g from the first variant; want ≤ 1e-5",
					v, worstRef, worstBase)
			}
		})
}

func maxAbsDiff(a, b []float32) float64 {
	worst := 0.0
	for i := range a {
		worst = max(worst, math.Abs(float64(a[i])-float64(b[i])))
	}
	return worst
}

// TestKernelCompilesCleanly: the kernels' C files build without a warning
// under -Wall -Wextra (cgo's own flags have to leave out
// -Wunused-parameter, which its generated wrappers trip), with the host's
// compiler and with each cross compiler installed (the arm64 and ARMv7
// paths are other code). It runs natively only: under qemu-user a fork
// from this process, which holds ONNX Runtime's threads, can hang before
// the child execs (a CI run waited in forkExec until the timeout), and the
// native run already compiles for every target.
func TestKernelCompilesCleanly(t *testing.T) {
	if emu := os.Getenv("EDGEINFER_EMULATED"); emu != "" {
		t.Skipf("the compilers are checked by the native run (running under %s)", emu)
	}
	files, err := filepath.Glob("*.c")
	if err != nil || len(files) == 0 {
		t.Fatalf("no C files (%v)", err)
	}
	compilers := []string{cmp.Or(os.Getenv("CC"), "gcc")}
	for _, cross := range []string{"aarch64-linux-gnu-gcc", "arm-linux-gnueabihf-gcc"} {
		if _, err := exec.LookPath(cross); err == nil && cross != compilers[0] {
			compilers = append(compilers, cross)
		}
	}
	if _, err := exec.LookPath(compilers[0]); err != nil {
		t.Skipf("no C compiler %q: %v", compilers[0], err)
	}
	for _, cc := range compilers {
		for _, f := range files {
			out, err := exec.Command(cc, "-O3", "-Wall", "-Wextra", "-Werror", "-c", "-o", os.DevNull, f).CombinedOutput()
			if err != nil {
				t.Errorf("%s %s: %v\n%s", cc, f, err, out)
			}
		}
		t.Logf("%s: %d files clean", cc, len(files))
	}
}

// TestKernelMatMulQ4VNNIEmulated: on an x86 CPU without AVX-512 VNNI, the
// int4/int8 kernel's VNNI paths still run — built with EI_Q4_EMULATE_VNNI,
// their one VNNI instruction written in AVX2 — against the generic path
// (testdata/matmul_emulated.c has the cases). On a CPU with VNNI,
// TestKernelMatMulQ4Variants runs the real instruction.
func TestKernelMatMulQ4VNNIEmulated(t *testing.T) {
	if goruntime.GOARCH != "amd64" {
		t.Skip("the VNNI paths are x86-64 code")
	}
	bin := buildKernelProgram(t, "matmul_emulated", "-O2", "-DEI_Q4_EMULATE_VNNI")
	out, err := exec.Command(bin).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the emulated VNNI paths differ from the generic one: %v", err)
	}
	if !strings.Contains(string(out), "avxvnni") {
		t.Fatalf("no case ran")
	}
}

// BenchmarkGEMVShare is the share of the read bandwidth the kernel
// reaches when its weights come from memory: testdata/gemv_share.c, built
// with the flags cgo builds matmul_q4.c with, runs one decode step's
// products of synthetic-1b (584 MB in int4, 1,104 MB in int8) on two
// threads beside a read loop over the same bytes, alternated, for every
// variant this CPU runs at 1 and 8 activation rows, its batches in order
// and split by regions for the threads (ei_q4_plan), and prints the
// medians; then the same on one thread, what one core streams by itself.
// Each line is logged; the metrics are the current variant's batch-1
// shares, by regions (as the engine runs it) and in order, and on one
// thread (-1thread), per precision.
func BenchmarkGEMVShare(b *testing.B) {
	benchKernelProgram(b, "gemv_share", [][]string{{"2"}, {"1"}},
		func(b *testing.B, args []string, line string) {
			metrics := map[string]string{"by regions": "share-b1", "in order": "share-b1-in-order"}
			if args[0] == "1" { // one thread runs every batch, whatever the layout
				metrics = map[string]string{"by regions": "share-b1-1thread"}
			}
			for layout, metric := range metrics {
				if share, ok := batch1Share(line, layout); ok {
					b.ReportMetric(share, metric)
				}
			}
		})
}

// benchKernelProgram builds testdata/<name>.c with the kernel, runs it for
// int4 and int8 (9 rounds each), once with each of runs' further
// arguments, on amd64 or arm64 (the programs' read loops and spin waits
// are written for both), logs every line it prints and hands each to
// metrics with the arguments it ran with. Under an emulator it skips: the
// program would be a child the emulator does not follow, and its times
// the emulator's.
func benchKernelProgram(b *testing.B, name string, runs [][]string, metrics func(b *testing.B, args []string, line string)) {
	if goruntime.GOARCH != "amd64" && goruntime.GOARCH != "arm64" {
		b.Skipf("the program is written for amd64 and arm64, not %s", goruntime.GOARCH)
	}
	if emu := os.Getenv("EDGEINFER_EMULATED"); emu != "" {
		b.Skipf("a CPU's figures, not %s's", emu)
	}
	bin := buildKernelProgram(b, name, "-O3") // cgo's optimisation (customops.go)
	for _, bits := range []string{"4", "8"} {
		b.Run("int"+bits, func(b *testing.B) {
			for b.Loop() {
				for _, args := range runs {
					out, err := exec.Command(bin, append([]string{"9", bits}, args...)...).CombinedOutput()
					if err != nil {
						b.Fatalf("%v\n%s", err, out)
					}
					for line := range strings.Lines(string(out)) {
						b.Log(strings.TrimSpace(line))
						metrics(b, args, line)
					}
				}
			}
		})
	}
}

// BenchmarkMatMulQ4GEMV is each variant's batch-1 product where the
// caches hold the weights, so the arithmetic and the instructions around
// it set the time: testdata/gemv_cache.c, one thread, over one 1,536 × 512
// matrix (the second-level cache) and synthetic-50m's step (19.8 MB in
// int4: a 32 MiB last-level cache), rounds alternating the variants, and
// each variant with a batch-1 product of its own again on its tile
// (<variant>-tile). Each line is logged; the metrics are each variant's
// median time against the fastest variant's (x-fastest), per precision and
// working set.
func BenchmarkMatMulQ4GEMV(b *testing.B) {
	benchKernelProgram(b, "gemv_cache", [][]string{nil}, func(b *testing.B, _ []string, line string) {
		if metric, x, ok := fastestRatio(line); ok {
			b.ReportMetric(x, metric)
		}
	})
}

// fastestRatio reads a gemv_cache line ("<variant> int<bits> <set>: <µs>
// us (range …), <x> x the fastest") as the metric <variant>-<set>-x-fastest.
func fastestRatio(line string) (metric string, x float64, ok bool) {
	head, rest, ok1 := strings.Cut(line, ": ")
	f := strings.Fields(head)
	_, after, ok2 := strings.Cut(rest, "), ")
	if _, err := fmt.Sscanf(after, "%g", &x); !ok1 || !ok2 || len(f) != 3 || err != nil {
		return "", 0, false
	}
	return f[0] + "-" + f[2] + "-x-fastest", x, true
}

// batch1Share reads the share from a gemv_share line of the current
// variant at one activation row with its batches in the given layout
// ("<variant> rows 1 <layout>: kernel … share <x> (range …)").
func batch1Share(line, layout string) (float64, bool) {
	v, rest, ok := strings.Cut(line, " rows 1 "+layout+": ")
	if !ok || v != q4Variant() {
		return 0, false
	}
	_, after, ok := strings.Cut(rest, "share ")
	var share float64
	if _, err := fmt.Sscanf(after, "%g", &share); !ok || err != nil {
		return 0, false
	}
	return share, true
}

// TestKernelsNamed: the version matrix's account of the kernels names the
// variants in use and the batch-1 product's prefetch choice.
func TestKernelsNamed(t *testing.T) {
	k := Kernels()
	t.Log(k)
	if !strings.Contains(k, "matmul "+q4Variant()+" (batch 1: ") || !strings.Contains(k, "attention "+attentionVariant()) ||
		!strings.Contains(k, "prefetch") {
		t.Fatalf("Kernels() = %q: want the matmul and attention variants and the batch-1 prefetch choice", k)
	}
}

// buildKernelProgram compiles testdata/NAME.c with the int4 kernel
// (matmul_q4.c) and flags into a program in a temporary directory,
// warnings as errors; without a C compiler the test is skipped.
func buildKernelProgram(tb testing.TB, name string, flags ...string) string {
	tb.Helper()
	cc := cmp.Or(os.Getenv("CC"), "gcc")
	if _, err := exec.LookPath(cc); err != nil {
		tb.Skipf("no C compiler %q: %v", cc, err)
	}
	bin := filepath.Join(tb.TempDir(), name)
	args := append(slices.Clone(flags), "-Wall", "-Wextra", "-Werror", "-o", bin,
		filepath.Join("testdata", name+".c"), "matmul_q4.c", "-lm", "-lpthread")
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", cc, err, out)
	}
	return bin
}

// TestKernelsGODEBUG: GODEBUG=cpu.<name>=off (the Go runtime's switch,
// read by golang.org/x/sys/cpu) leaves out the kernels' variants that need
// the instruction sets switched off, as if the CPU lacked them, keeps the
// others the CPU runs, and the version matrix (Kernels) names the switch:
// cpu.avx512f=off,cpu.avxvnni=off runs a CPU with AVX2 alone;
// cpu.avx512vnni=off one with AVX-512 but no VNNI (Skylake-SP), whose
// attention keeps its AVX-512 code; on arm64 cpu.asimddp=off one without
// the dot product. Each switched process is this test binary again.
func TestKernelsGODEBUG(t *testing.T) {
	needLib(t)
	if os.Getenv("EI_KERNELS_GODEBUG_CHILD") == "1" {
		fmt.Printf("matmul=%s\nattention=%s\nkernels=%s\n", strings.Join(q4Variants(), ","),
			strings.Join(attentionVariants(), ","), Kernels())
		return
	}
	type kinds map[string][]string // by "matmul" and "attention"
	cases := map[string][]struct {
		godebug    string
		left, kept kinds // what may run; what must still run where the CPU runs it
	}{
		"amd64": {
			{"cpu.avx512f=off,cpu.avxvnni=off", kinds{"matmul": {"generic", "avx2"}, "attention": {"generic", "avx2-loops", "avx2"}},
				kinds{"matmul": {"avx2"}, "attention": {"avx2"}}},
			{"cpu.avx512vnni=off", kinds{"matmul": {"generic", "avx2", "avxvnni"}, "attention": {"generic", "avx2-loops", "avx2", "avx512-loops", "avx512"}},
				kinds{"matmul": {"avxvnni"}, "attention": {"avx512"}}},
		},
		"arm64": {{"cpu.asimddp=off", kinds{"matmul": {"generic"}, "attention": {"generic"}}, kinds{}}},
	}[goruntime.GOARCH]
	if len(cases) == 0 {
		t.Skipf("no variant to switch off on %s", goruntime.GOARCH)
	}
	if emu := os.Getenv("EDGEINFER_EMULATED"); emu != "" {
		t.Skipf("re-executes its binary, which %s does not follow (TestKernelsMasked runs the mask in process)", emu)
	}
	here := kinds{"matmul": q4Variants(), "attention": attentionVariants()}
	for _, c := range cases {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKernelsGODEBUG$")
		cmd.Env = append(os.Environ(), "EI_KERNELS_GODEBUG_CHILD=1", "GODEBUG="+c.godebug)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("GODEBUG=%s: child: %v\n%s", c.godebug, err, out)
		}
		got := map[string]string{}
		for _, line := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && (k == "matmul" || k == "attention" || k == "kernels") {
				got[k] = v
			}
		}
		t.Logf("GODEBUG=%s: matmul variants [%s], attention variants [%s]; %s", c.godebug, got["matmul"], got["attention"], got["kernels"])
		for kind, left := range c.left {
			child := strings.Split(got[kind], ",")
			for _, v := range child {
				if !slices.Contains(left, v) {
					t.Errorf("GODEBUG=%s: %s variant %s runs", c.godebug, kind, v)
				}
			}
			for _, v := range c.kept[kind] {
				if slices.Contains(here[kind], v) && !slices.Contains(child, v) {
					t.Errorf("GODEBUG=%s: %s variants [%s]: %s, which this CPU runs, left out too", c.godebug, kind, got[kind], v)
				}
			}
		}
		if !strings.Contains(got["kernels"], "GODEBUG "+c.godebug) {
			t.Errorf("Kernels() = %q: want it to name GODEBUG %s", got["kernels"], c.godebug)
		}
	}
}

// TestKernelsPrefetchEnv: EDGEINFER_PREFETCH sets the matrix kernel's
// prefetch hint against the CPU's choice, the version matrix names it and
// what set it, and any other value is refused with the variable's name.
func TestKernelsPrefetchEnv(t *testing.T) {
	needLib(t)
	t.Cleanup(func() { pickVariants(kernelsOff()) }) // after Setenv's restore: the CPU's choice again
	for _, c := range []struct{ v, want, not string }{
		{"nta", ", non-temporal, one region", "AMD family"},
		{"t0", " ahead, one region", "non-temporal"},
	} {
		t.Setenv(prefetchEnv, c.v)
		pickVariants(kernelsOff()) // as the library's load does
		k := Kernels()
		if !strings.HasSuffix(k, "("+prefetchEnv+"="+c.v+")") {
			t.Errorf("%s=%s: version matrix %q does not name the switch", prefetchEnv, c.v, k)
		}
		if goruntime.GOARCH != "amd64" {
			continue // only the x86 tiles prefetch: the matrix says "hardware prefetch only"
		}
		if !strings.Contains(k, c.want) || strings.Contains(k, c.not) {
			t.Errorf("%s=%s: version matrix %q, want %q in it and not %q", prefetchEnv, c.v, k, c.want, c.not)
		}
	}
	t.Setenv(prefetchEnv, "temporal")
	if _, err := prefetchHint(); err == nil || !strings.Contains(err.Error(), prefetchEnv) || !strings.Contains(err.Error(), "nta or t0") {
		t.Errorf("%s=temporal: %v, want a refusal naming the variable and its values", prefetchEnv, err)
	}
}

// TestKernelsMasked: each instruction set switched off (cpu.h, as
// kernelsOff derives them from GODEBUG) leaves out exactly the variants
// that need it, in this process, on every architecture (under qemu too,
// where TestKernelsGODEBUG cannot re-execute itself).
func TestKernelsMasked(t *testing.T) {
	needLib(t)
	base := kernelsOff() // what the CPU lacks, or GODEBUG switched off
	defer pickVariants(base)
	here := map[string][]string{"matmul": q4Variants(), "attention": attentionVariants()}
	needs := map[string]uint{ // the bits a variant needs
		"avx2": cpuOffAVX2, "avx2-loops": cpuOffAVX2, "avxvnni": cpuOffAVX2 | cpuOffAVXVNNI,
		"avx512vnni": cpuOffAVX2 | cpuOffAVX512 | cpuOffAVX512VNNI, "avx512": cpuOffAVX2 | cpuOffAVX512, "avx512-loops": cpuOffAVX2 | cpuOffAVX512,
		"neon-dotprod": cpuOffDotProd,
	}
	for _, off := range []uint{cpuOffAVX2, cpuOffAVXVNNI, cpuOffAVX512, cpuOffAVX512VNNI, cpuOffAVX512 | cpuOffAVXVNNI, cpuOffDotProd} {
		pickVariants(base | off)
		got := map[string][]string{"matmul": q4Variants(), "attention": attentionVariants()}
		for kind, vs := range here {
			var want []string
			for _, v := range vs {
				if needs[v]&off == 0 {
					want = append(want, v)
				}
			}
			if !slices.Equal(got[kind], want) {
				t.Errorf("off %#x: %s variants %v, want %v (of %v)", off, kind, got[kind], want, vs)
			}
		}
		current := map[string]string{"matmul": q4Variant(), "attention": attentionVariant()}
		for kind, v := range current {
			if g := got[kind]; v != g[len(g)-1] {
				t.Errorf("off %#x: %s picks %s, want the best left, %s", off, kind, v, g[len(g)-1])
			}
		}
	}
	t.Logf("variants here: matmul %v, attention %v", here["matmul"], here["attention"])
}
