package ort

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestKernelNEONInstructions counts the instructions the NEON variant's
// tile executes a block of eight weight rows and one activation row, for
// int4 and int8, at one activation row (a batch-1 decode step), two, and
// four (a full tile: batch 8 and prefill), on one product by a 1,024 × 512
// matrix (testdata/neon_icount.c, built for arm64 with Debian's cross
// compiler and run under qemu-aarch64, which logs every block it
// translates and every block it runs). No Arm core is at hand to time the
// tile; the count is exact and the same on every run, and half of it is a
// floor on the cycles of an in-order core that issues two instructions a
// cycle at most, such as the Cortex-A55. It fails where a
// count is over its budget (a loop the compiler did not unroll, registers
// spilled, a load the lanes should have saved), where the tile is not the
// code that ran, or where its outputs differ from the generic variant's.
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
	bin := filepath.Join(t.TempDir(), "neon_icount")
	out, err := exec.Command(cc, "-O3", "-static", "-Wall", "-Wextra", "-Werror", "-o", bin,
		filepath.Join("testdata", "neon_icount.c"), "matmul_q4.c", "-lm", "-lpthread").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	funcs, err := elfFuncs(bin, "tile_dotprod_q4", "tile_dotprod_q8")
	if err != nil {
		t.Fatal(err)
	}
	const blocks = 1024 / 8 * 512 / 32 // groups of eight weight rows × blocks of 32
	// Budgets a block and activation row, over what the tile takes with
	// GCC 12 at -O3 (int4: 81.4 at one row, 54.4 at two, 51.7 at four;
	// int8: 69.6, 45.2, 43.6). The tile it replaced, which loaded and
	// broadcast four activation codes a vector and looped over rows it did
	// not know at compile time, took 211.6, 152.1 and 120.6 in int4 and
	// 301.6, 198.1 and 142.6 in int8.
	budget := map[string]map[int]float64{"4": {1: 90, 2: 62, 4: 58}, "8": {1: 78, 2: 52, 4: 50}}
	for _, bits := range []string{"4", "8"} {
		for _, rows := range []int{1, 2, 4} {
			fn := "tile_dotprod_q" + bits
			n := icount(t, qemu, bin, funcs, bits, strconv.Itoa(rows))
			per := float64(n[fn]) / blocks / float64(rows)
			t.Logf("int%s, %d activation rows: %.1f instructions a block of eight weight rows and an activation row (%d blocks)",
				bits, rows, per, blocks)
			if n[fn] == 0 {
				t.Errorf("int%s, %d rows: no instruction counted in the NEON tile (%v): it did not run, or qemu's log no longer reads as parseICount expects", bits, rows, n)
			} else if per > budget[bits][rows] {
				t.Errorf("int%s, %d rows: %.1f instructions a block, over the budget of %.0f", bits, rows, per, budget[bits][rows])
			}
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

// icount runs the program under qemu with its in_asm and exec logs on a
// pipe and returns the instructions executed inside each function of
// funcs. The logs are filtered to those functions (-dfilter): the whole
// program's are ~60 MB a run, which the race detector's build of the
// parser took minutes to read.
func icount(t *testing.T, qemu, bin string, funcs map[string][2]uint64, args ...string) map[string]int {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var ranges []string
	for _, rg := range funcs {
		ranges = append(ranges, fmt.Sprintf("0x%x..0x%x", rg[0], rg[1]-1))
	}
	cmd := exec.Command(qemu, append([]string{"-d", "in_asm,exec,nochain", "-dfilter", strings.Join(ranges, ","),
		"-D", "/dev/fd/3", bin}, args...)...)
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
		t.Fatalf("%s %v: %v\n%s", bin, args, waitErr, stdout.String())
	}
	if v := strings.TrimSpace(stdout.String()); v != "neon-dotprod" {
		t.Fatalf("the program ran %q, not the NEON variant (does qemu report the dot product?)", v)
	}
	return counts
}

// parseICount adds each logged block's instructions to the function of
// funcs it starts in, each time the block runs. qemu's in_asm log lists a
// block's instructions one a line ("0x<address>:  <code>  <mnemonic> …")
// after a line "IN: …"; its exec log (nochain: every block run is logged)
// has a line "Trace <cpu>: 0x<host> [<flags>/<guest PC>/…] …" a run.
func parseICount(r io.Reader, funcs map[string][2]uint64, counts map[string]int) error {
	size := map[uint64]int{} // a translated block's instructions, by its first address
	var first uint64
	inBlock := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if addr, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(addr, "0x") {
			if a, err := strconv.ParseUint(addr[2:], 16, 64); err == nil {
				if !inBlock {
					first, inBlock = a, true
					size[first] = 0
				}
				size[first]++
				continue
			}
		}
		inBlock = false
		if !strings.HasPrefix(line, "Trace ") {
			continue
		}
		_, rest, ok := strings.Cut(line, "[")
		if f := strings.SplitN(rest, "/", 3); ok && len(f) == 3 {
			pc, err := strconv.ParseUint(f[1], 16, 64)
			if err != nil {
				return fmt.Errorf("qemu's exec log: %q: %w", line, err)
			}
			for name, rg := range funcs {
				if pc >= rg[0] && pc < rg[1] {
					counts[name] += size[pc]
				}
			}
		}
	}
	return sc.Err()
}
