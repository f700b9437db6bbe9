package ort

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestKernelNEONInstructions counts the instructions the NEON variant's
// batch-1 product executes against its tile's, for int4 and int8, on one
// product of a row by a 1,024 × 512 matrix (testdata/gemv_icount.c, built
// for arm64 with Debian's cross compiler and run under qemu-aarch64, which
// logs every translated block and every block it runs). No Arm core is
// at hand to time them; the count is exact and the same on every run, and
// an in-order core such as the Cortex-A55 issues about as many cycles as
// it has instructions to issue. It fails if the batch-1 product is not
// the code that ran, if it takes more instructions a block of eight rows
// than its budget (a loop the compiler did not unroll, a load the lanes
// should have made), or if its outputs differ from the tile's.
func TestKernelNEONInstructions(t *testing.T) {
	if emu := os.Getenv("EDGEINFER_EMULATED"); emu != "" {
		t.Skipf("the count runs its own emulator (running under %s)", emu)
	}
	const cc, qemu = "aarch64-linux-gnu-gcc", "qemu-aarch64-static"
	for _, tool := range []string{cc, qemu} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (apt-get install gcc-aarch64-linux-gnu qemu-user-static): %v", tool, err)
		}
	}
	bin := filepath.Join(t.TempDir(), "gemv_icount")
	out, err := exec.Command(cc, "-O3", "-static", "-Wall", "-Wextra", "-Werror", "-o", bin,
		filepath.Join("testdata", "gemv_icount.c"), "matmul_q4.c", "-lm", "-lpthread").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	funcs, err := elfFuncs(bin, "gemv_neon_q4", "gemv_neon_q8", "tile_dotprod")
	if err != nil {
		t.Fatal(err)
	}
	const blocks = 1024 / 8 * 512 / 32 // groups of eight rows × blocks of 32
	// Budgets a block of eight rows, with a margin over what the product
	// takes today (80 in int4, 69 in int8, with GCC 12 at -O3).
	budget := map[string]float64{"4": 96, "8": 84}
	for _, bits := range []string{"4", "8"} {
		gemv := "gemv_neon_q" + bits
		n1, sum1 := icount(t, qemu, bin, bits, "1", funcs)
		n0, sum0 := icount(t, qemu, bin, bits, "0", funcs)
		per1, per0 := float64(n1[gemv])/blocks, float64(n0["tile_dotprod"])/blocks
		t.Logf("int%s, instructions a block of eight rows (%d blocks): batch-1 product %.1f, tile %.1f (%.2f×)",
			bits, blocks, per1, per0, per1/per0)
		switch {
		case n1[gemv] == 0 || n1["tile_dotprod"] != 0:
			t.Errorf("int%s: with the batch-1 product on, it ran %d instructions and the tile %d: the product did not run", bits, n1[gemv], n1["tile_dotprod"])
		case n0[gemv] != 0 || n0["tile_dotprod"] == 0:
			t.Errorf("int%s: with it off, it ran %d instructions and the tile %d: the switch did nothing", bits, n0[gemv], n0["tile_dotprod"])
		case per1 > budget[bits]:
			t.Errorf("int%s: the batch-1 product takes %.1f instructions a block, over its budget of %.0f", bits, per1, budget[bits])
		case math.Abs(sum1-sum0) > 1e-4*(math.Abs(sum0)+1):
			t.Errorf("int%s: the outputs' sum is %g on the batch-1 product and %g on the tile", bits, sum1, sum0)
		}
	}
}

// elfFuncs is each named function's address range in the program's
// symbol table.
func elfFuncs(bin string, names ...string) (map[string][2]uint64, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	r := map[string][2]uint64{}
	for _, s := range syms {
		for _, n := range names {
			if s.Name == n && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
				r[n] = [2]uint64{s.Value, s.Value + s.Size}
			}
		}
	}
	for _, n := range names {
		if _, ok := r[n]; !ok {
			return nil, fmt.Errorf("%s: no function %s (inlined or renamed?)", bin, n)
		}
	}
	return r, nil
}

var (
	// qemu's in_asm log: a block's instructions, one a line, after "IN:".
	icountInsn = regexp.MustCompile(`^0x([0-9a-f]+):\s`)
	// its exec log (nochain: every block run is logged): the block's guest PC.
	icountExec = regexp.MustCompile(`^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/`)
)

// icount runs the program under qemu with its in_asm and exec logs on a
// pipe and returns the instructions executed inside each function of
// funcs, and the sum of the outputs the program printed.
func icount(t *testing.T, qemu, bin, bits, on string, funcs map[string][2]uint64) (map[string]int, float64) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(qemu, "-d", "in_asm,exec,nochain", "-D", "/dev/fd/3", bin, bits, on)
	cmd.ExtraFiles = []*os.File{w}
	var stdout strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	counts := map[string]int{}
	parsed := make(chan error, 1)
	go func() {
		parsed <- parseICount(r, funcs, counts)
		io.Copy(io.Discard, r) // let qemu finish if parsing stopped early
		r.Close()
	}()
	waitErr := cmd.Wait()
	if err := <-parsed; err != nil {
		t.Fatal(err)
	}
	if waitErr != nil {
		t.Fatalf("%s %s %s: %v\n%s", bin, bits, on, waitErr, stdout.String())
	}
	f := strings.Fields(stdout.String())
	if len(f) != 2 || f[0] != "neon-dotprod" {
		t.Fatalf("the program ran %q, not the NEON variant (does qemu report the dot product?)", stdout.String())
	}
	sum, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return counts, sum
}

// parseICount adds each logged block's instructions to the function of
// funcs it starts in, each time the block runs.
func parseICount(r io.Reader, funcs map[string][2]uint64, counts map[string]int) error {
	size := map[uint64]int{} // a translated block's instructions, by its first address
	var first uint64
	inBlock := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := icountInsn.FindStringSubmatch(line); m != nil {
			if !inBlock {
				first, _ = strconv.ParseUint(m[1], 16, 64)
				size[first], inBlock = 0, true
			}
			size[first]++
			continue
		}
		inBlock = false
		if m := icountExec.FindStringSubmatch(line); m != nil {
			pc, _ := strconv.ParseUint(m[1], 16, 64)
			for name, rg := range funcs {
				if pc >= rg[0] && pc < rg[1] {
					counts[name] += size[pc]
				}
			}
		}
	}
	return sc.Err()
}
