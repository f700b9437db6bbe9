package plugin

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/plugintest"
)

func hostile(t testing.TB, cfg Config) *Plugin {
	t.Helper()
	path := plugintest.Build(t, "runtime/plugin/testdata/hostile")
	p, err := LoadFile(context.Background(), path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func mode(m string, extra ...abi.Tensor) []abi.Tensor {
	return append([]abi.Tensor{abi.Str("mode", m)}, extra...)
}

// echoOK checks the plugin still serves: the next request succeeds.
func echoOK(t *testing.T, p *Plugin) {
	t.Helper()
	out, err := p.Call(context.Background(), mode("echo", abi.F32("x", []int64{2}, []float32{1.5, -2})))
	if err != nil {
		t.Fatalf("next request after the failure: %v", err)
	}
	x, _ := abi.Find(out, "x")
	if v, err := x.Float32s(); err != nil || len(v) != 2 || v[0] != 1.5 || v[1] != -2 {
		t.Fatalf("echo returned %v %v", out, err)
	}
}

func TestHostileGoPlugin(t *testing.T) {
	p := hostile(t, Config{MemoryMB: 32, MaxInstances: 1, CallTimeout: time.Minute})
	t.Logf("engine %s, compile %v, instantiate %v, memory %d KiB", p.Info().Engine, p.Info().Compile, p.Info().Instantiate, p.Info().InstanceMemory>>10)
	for _, tc := range []struct {
		mode string
		want error
		text string
	}{
		{"panic", ErrGuest, "hostile panic"},
		{"error", ErrGuest, "refused on purpose"},
		{"exit", ErrTrap, "exit_code(3)"},
		{"bomb", ErrMemory, "out of memory"},
		{"open", ErrGuest, "/etc/passwd"},
		{"nonsense", ErrGuest, "unknown mode"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			_, err := p.Call(context.Background(), mode(tc.mode, abi.Str("arg", "/etc/passwd")))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("error %v, want %v containing %q", err, tc.want, tc.text)
			}
			echoOK(t, p)
		})
	}
}

func TestTimeout(t *testing.T) {
	// the request's deadline is a quarter of the per-call limit, so a stop
	// by the limit is never taken for a stop by the deadline
	p := hostile(t, Config{CallTimeout: 400 * time.Millisecond})
	for _, tc := range []struct {
		name     string
		deadline time.Duration // the request's, 0 for none
		bound    time.Duration
		says     string // what the error names as the limit that fired
	}{
		{"per-call limit", 0, 400 * time.Millisecond, "per-call limit of 400ms"},
		{"request deadline", 100 * time.Millisecond, 100 * time.Millisecond, "request's deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			start := time.Now()
			_, err := p.Call(ctx, mode("loop"))
			took := time.Since(start)
			if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v, want ErrTimeout and context.DeadlineExceeded", err)
			}
			if !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), p.Name()) {
				t.Errorf("error %q names neither %q nor the plugin", err, tc.says)
			}
			// The limit is enforced when the guest's loop next checks the
			// context, so the stop comes a scheduling delay after it; on a
			// machine loaded past its cores that delay reached 71 ms. A
			// limit not enforced runs until the test's own timeout, one
			// enforced late (a default in place of this limit) past twice it.
			if took > 2*tc.bound {
				t.Errorf("infinite loop stopped after %v, bound %v: twice the limit", took, tc.bound)
			}
			t.Logf("stopped after %v (bound %v)", took, tc.bound)
			echoOK(t, p)
		})
	}
}

func TestSandboxFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keys.txt"), []byte("granted"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(p *Plugin, name string) ([]abi.Tensor, error) {
		return p.Call(context.Background(), mode("open", abi.Str("arg", name)))
	}
	closed := hostile(t, Config{})
	for _, name := range []string{secret, "/dict/keys.txt", "/etc/passwd", "../" + secret} {
		if _, err := open(closed, name); !errors.Is(err, ErrGuest) {
			t.Errorf("ungranted open %s: %v, want denied", name, err)
		}
	}
	echoOK(t, closed)

	granted := hostile(t, Config{Grants: Grants{Dirs: []Mount{{Host: dir, Guest: "/dict"}}}})
	out, err := open(granted, "/dict/keys.txt")
	if err != nil {
		t.Fatalf("granted read: %v", err)
	}
	if d, _ := abi.Find(out, "data"); string(d.Data) != "granted" {
		t.Errorf("read %q", d.Data)
	}
	for _, name := range []string{"/dict/../" + secret, secret} {
		if _, err := open(granted, name); !errors.Is(err, ErrGuest) {
			t.Errorf("open %s outside the grant: %v, want denied", name, err)
		}
	}
	echoOK(t, granted)
}

func TestSandboxClockRandom(t *testing.T) {
	first := func(p *Plugin, m string) []byte {
		out, err := p.Call(context.Background(), mode(m))
		if err != nil {
			t.Fatal(err)
		}
		return out[0].Data
	}
	closed := hostile(t, Config{MaxInstances: 1})
	ns := int64(binary.LittleEndian.Uint64(first(closed, "clock")))
	if time.Since(time.Unix(0, ns)) < 24*time.Hour {
		t.Errorf("ungranted clock reads %v", time.Unix(0, ns))
	}
	r1 := first(closed, "random")
	open := hostile(t, Config{MaxInstances: 1, Grants: Grants{Clock: true, Random: true}})
	if ns := int64(binary.LittleEndian.Uint64(first(open, "clock"))); time.Since(time.Unix(0, ns)).Abs() > time.Minute {
		t.Errorf("granted clock reads %v", time.Unix(0, ns))
	}
	if r2 := first(open, "random"); bytes.Equal(r1, r2) {
		t.Errorf("granted random equals the deterministic source: %x", r2)
	}
}

func raw(t *testing.T, run []byte, cfg Config) *Plugin {
	t.Helper()
	cfg.CacheDir = "-"
	p, err := Load(context.Background(), "raw", rawModule(run...), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func TestRawModuleFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  []byte
		want error
		text string
	}{
		{"unreachable", runUnreachable, ErrTrap, "unreachable"},
		{"pointer outside memory", runFromMemory, ErrResult, "outside"},
		{"memory.grow bomb", runGrow, ErrResult, "shorter than a header"},
		{"loop", runLoop, ErrTimeout, "per-call limit of 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A bound on a call that hangs, not a measure of speed: the
			// grow bomb's call (a fresh instance growing to its cap) took
			// more than 2 s under -race beside stress-ng.
			timeout := 30 * time.Second
			if tc.want == ErrTimeout {
				timeout = 100 * time.Millisecond
			}
			p := raw(t, tc.run, Config{MemoryMB: 16, CallTimeout: timeout, MaxInstances: 1})
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := range 2 { // the second call runs in a fresh instance
				if tc.name == "pointer outside memory" {
					var in *instance
					select {
					case in = <-p.idle:
					default:
						var err error
						if in, err = p.instantiate(context.Background()); err != nil {
							t.Fatal(err)
						}
					}
					var b [8]byte
					binary.LittleEndian.PutUint64(b[:], uint64(70000)<<32|16)
					in.mem.Write(0, b[:])
					p.idle <- in
				}
				_, err := p.Call(context.Background(), nil)
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
					t.Fatalf("call %d: %v, want %v containing %q", i, err, tc.want, tc.text)
				}
			}
			if n := p.rawPages(t); tc.name == "memory.grow bomb" && n > 16*16 {
				t.Errorf("memory grew to %d pages past the 16 MiB cap", n)
			}
		})
	}
}

// rawPages starts an instance and reports its memory in pages.
func (p *Plugin) rawPages(t *testing.T) uint32 {
	in, err := p.instantiate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer in.mod.Close(context.Background())
	return in.mem.Size() / 65536
}

// TestMemoryBombRSS: a Go plugin allocating without end is stopped at its
// cap, and the host's resident memory stays bounded by about the cap.
func TestMemoryBombRSS(t *testing.T) {
	if raceEnabled {
		t.Skip("-race: the detector's shadow memory grows RSS by more than the bound (155 MiB measured); run without -race")
	}
	p := hostile(t, Config{MemoryMB: 32, MaxInstances: 1, CallTimeout: time.Minute})
	debug.FreeOSMemory()
	base := rss(t)
	for range 3 {
		if _, err := p.Call(context.Background(), mode("bomb")); !errors.Is(err, ErrMemory) {
			t.Fatalf("bomb: %v", err)
		}
	}
	// Freed memory goes back to the OS lazily (the Go scavenger): return
	// it now, so what is left is what the host still holds.
	debug.FreeOSMemory()
	grew := rss(t) - base
	t.Logf("RSS grew %d MiB over three 32 MiB bombs", grew>>20)
	// three bombs kept would be ~96 MiB; one cap's worth is allowed
	if grew > 48<<20 {
		t.Errorf("host RSS grew %d MiB", grew>>20)
	}
	echoOK(t, p)
}

func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmRSS")
	return 0
}

func TestNotAPlugin(t *testing.T) {
	for name, wasm := range map[string][]byte{
		"garbage":    []byte("not wasm"),
		"no exports": {0, 'a', 's', 'm', 1, 0, 0, 0},
	} {
		if _, err := Load(context.Background(), name, wasm, Config{CacheDir: "-"}); !errors.Is(err, ErrABI) {
			t.Errorf("%s: %v, want ErrABI", name, err)
		}
	}
	if err := (Config{Engine: "jit"}).Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("engine jit: %v", err)
	}
}

// BenchmarkInterrupt: a tight arithmetic loop in a Go guest with wazero's
// cancellation checks (the sandbox default) and without (NoInterrupt),
// beside the same loop compiled natively.
func BenchmarkInterrupt(b *testing.B) {
	arg := abi.Str("arg", "xxx") // 3 M iterations
	b.Run("native", func(b *testing.B) {
		for b.Loop() {
			x := 1.0
			for i := range 3 * 1000000 {
				x = x*1.0000001 + float64(i&7)
			}
			sink = x
		}
	})
	for _, off := range []bool{false, true} {
		name := "checks"
		if off {
			name = "nointerrupt"
		}
		b.Run(name, func(b *testing.B) {
			path := plugintest.Build(b, "runtime/plugin/testdata/hostile")
			p, err := LoadFile(context.Background(), path, Config{NoInterrupt: off, CallTimeout: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			for b.Loop() {
				if _, err := p.Call(context.Background(), []abi.Tensor{abi.Str("mode", "spin"), arg}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var sink float64

// TestConcurrentCalls: calls beyond MaxInstances wait for an instance, a
// failing call among them fails alone.
func TestConcurrentCalls(t *testing.T) {
	p := hostile(t, Config{MaxInstances: 2})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			m := "echo"
			if i == 3 {
				m = "exit"
			}
			_, errs[i] = p.Call(context.Background(), mode(m, abi.F32("x", []int64{2}, []float32{1.5, -2})))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (i == 3) != (err != nil) {
			t.Errorf("call %d: %v", i, err)
		}
	}
	echoOK(t, p)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Call(context.Background(), mode("echo")); !errors.Is(err, ErrClosed) {
		t.Errorf("call after Close: %v", err)
	}
}

// TestStartLimit: a module whose _initialize never returns is stopped by
// the start limit, its own, not the per-call limit nor a 10-s default, and
// the error names the plugin and the limit; a memory cap under what the
// module declares is reported as the cap, not as a broken ABI.
func TestStartLimit(t *testing.T) {
	start := time.Now()
	_, err := Load(context.Background(), "spin.wasm", rawModuleInit(initLoop, runUnreachable...),
		Config{CacheDir: "-", CallTimeout: 2 * time.Second, StartTimeout: 300 * time.Millisecond})
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want ErrTimeout", err)
	}
	for _, want := range []string{"spin.wasm", "start limit of 300ms", "_initialize"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if took > 2*300*time.Millisecond+time.Second { // a compile, then the limit and a scheduling delay
		t.Errorf("the start took %v under a 300ms start limit", took)
	}
	t.Logf("stopped after %v: %v", took, err)

	// A module declaring 2 pages (128 KiB) of memory is fine under a
	// 1 MiB cap; hostile's Go runtime needs more than 1 MiB.
	_, err = LoadFile(context.Background(), plugintest.Build(t, "runtime/plugin/testdata/hostile"), Config{CacheDir: "-", MemoryMB: 1})
	if !errors.Is(err, ErrMemory) || errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "cap of 1 MiB") {
		t.Errorf("a 1 MiB cap: %v, want ErrMemory naming the cap", err)
	}
}

// TestHeldInputs: a plugin that asked for held inputs (guest.HoldLarge)
// gets an input of HeldMin bytes or more as a handle and one below inline,
// and reads the held one in with guest.Read: the same sum either way; an
// input it returns unchanged comes back whole.
func TestHeldInputs(t *testing.T) {
	p := hostile(t, Config{})
	if !p.Info().HeldInputs {
		t.Fatal("Info().HeldInputs is false for a plugin built with guest.HoldLarge")
	}
	for _, n := range []int{HeldMin/4 - 1, HeldMin / 4, 1 << 20} {
		v := make([]float32, n)
		want := 0.0
		for i := range v {
			v[i] = float32(i % 7)
			want += float64(v[i])
		}
		x := abi.F32("x", []int64{int64(n)}, v)
		out, err := p.Call(context.Background(), mode("held-sum", x))
		if err != nil {
			t.Fatalf("%d floats: %v", n, err)
		}
		s, _ := abi.Find(out, "sum")
		h, _ := abi.Find(out, "held")
		sum, _ := s.Float64s()
		held, _ := h.Int64s()
		if len(sum) != 1 || sum[0] != want || len(held) != 1 || (held[0] == 1) != (4*n >= HeldMin) {
			t.Errorf("%d floats (%d bytes): sum %v held %v, want %v held %v", n, 4*n, sum, held, want, 4*n >= HeldMin)
		}
		if len(x.Data) != 4*n || x.Handle != 0 {
			t.Error("Call changed the caller's tensor")
		}
		// Returned as it came (held or not), the input comes back whole.
		out, err = p.Call(context.Background(), mode("echo", x))
		if err != nil {
			t.Fatalf("%d floats, echoed: %v", n, err)
		}
		back, _ := abi.Find(out, "x")
		if got, _ := back.Float32s(); !slices.Equal(got, v) || back.Held() {
			t.Errorf("%d floats, echoed: %d floats back, held %v", n, len(got), back.Held())
		}
	}
}

// TestHostileHostCalls: a plugin that abuses the host primitives is
// stopped as one that misbehaves in its own code would be, and the plugin
// serves the next request. Quadratic work handed to the host stops at the
// per-call limit; an image too large for the memory cap is refused from
// its header; a name the host does not have, a pointer outside the
// module's memory, and handles to held data the request does not have
// (read, passed to a primitive, or answered with) fail that call alone.
func TestHostileHostCalls(t *testing.T) {
	const limit = 400 * time.Millisecond
	p := hostile(t, Config{MemoryMB: 64, MaxInstances: 1, CallTimeout: limit})
	for _, tc := range []struct {
		mode string
		want error
		text string
	}{
		{"host-nms", ErrTimeout, "per-call limit of 400ms"},
		{"host-image", ErrGuest, "30000x30000"},
		{"host-unknown", ErrGuest, `unknown "fs.read"`},
		{"host-pointer", ErrTrap, "outside the module's"},
		{"held-read", ErrTrap, "handle 5 is not one this request holds"},
		{"held-ref", ErrGuest, "handle 5 of 16 bytes is not one the host holds"},
		{"held-out", ErrResult, `tensor "x" names held data (handle 1 of 16 bytes) this request does not hold`},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			start := time.Now()
			_, err := p.Call(context.Background(), mode(tc.mode))
			took := time.Since(start)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("error %v, want %v containing %q", err, tc.want, tc.text)
			}
			// Done in full, the NMS takes minutes; stopped, a scheduling
			// delay past the limit (see TestTimeout for the bound), which
			// reached 1.8 s under -race beside stress-ng: 15 s still
			// tells a stopped call from one that ran to its end.
			if took > 15*time.Second {
				t.Errorf("stopped after %v, limit %v", took, limit)
			}
			t.Logf("%s: %v after %v", tc.mode, err, took)
			echoOK(t, p)
		})
	}
}

// TestResolveHeld: a request or response that names held data by handle
// gets the data the call holds under it, at the size its shape says; any
// other handle is malformed, naming the tensor.
func TestResolveHeld(t *testing.T) {
	data := make([]byte, 16)
	hc := &hostCall{held: [][]byte{data}}
	ts := []abi.Tensor{abi.Str("s", "ok"), {Name: "x", DType: abi.Float32, Shape: []int64{4}, Handle: 1}}
	if err := hc.resolve(ts, false); err != nil || ts[1].Held() || len(ts[1].Data) != 16 || &ts[1].Data[0] != &data[0] {
		t.Fatalf("resolve: %+v, %v", ts[1], err)
	}
	for _, bad := range []abi.Tensor{
		{Name: "x", DType: abi.Float32, Shape: []int64{4}, Handle: 2},
		{Name: "x", DType: abi.Float32, Shape: []int64{5}, Handle: 1},
	} {
		if err := hc.resolve([]abi.Tensor{bad}, false); !errors.Is(err, abi.ErrMalformed) || !strings.Contains(err.Error(), `"x"`) {
			t.Errorf("handle %d, shape %v: %v", bad.Handle, bad.Shape, err)
		}
	}
}
