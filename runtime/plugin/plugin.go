package plugin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Plugin is one compiled module and a pool of its instances. Each call
// runs in an instance of its own (an instance is single-threaded); calls
// beyond Config.MaxInstances wait. An instance whose call trapped, timed
// out or returned a malformed result is closed and replaced by a fresh one
// on a later call: the failure is that request's alone.
//
// A Plugin is safe for concurrent use.
type Plugin struct {
	name     string
	cfg      Config
	info     Info
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	modCfg   wazero.ModuleConfig
	holds    bool           // the module asked for held inputs (features bit 0)
	slots    chan struct{}  // one token per running call
	idle     chan *instance // instances ready for a call
	done     chan struct{}  // closed by Close
	closing  sync.Once
	closeErr error
}

// Info describes a loaded plugin for reports and the version matrix.
type Info struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	// Engine is what runs the module: "compiler" or "interpreter".
	Engine string `json:"engine"`
	// Wazero is the wazero module version linked.
	Wazero string `json:"wazero"`
	// Compile is the time CompileModule took (short when the disk cache
	// had the module).
	Compile time.Duration `json:"compile_ns"`
	// Instantiate is the first instance's start-up (the guest's
	// _initialize: a Go guest's runtime and package init).
	Instantiate time.Duration `json:"instantiate_ns"`
	// InstanceMemory is a fresh instance's linear memory in bytes.
	InstanceMemory uint64 `json:"instance_memory_bytes"`
	// HeldInputs: the module asked for inputs of HeldMin bytes or more to
	// stay on the host (ABI.md, "Held tensors").
	HeldInputs bool `json:"held_inputs"`
}

// HeldMin is the size from which a plugin that asks for held inputs gets
// an input as a handle rather than copied into its memory: below it the
// copy costs less than a primitive call's overhead (BenchmarkCallOverhead).
const HeldMin = 64 << 10

// FeatureHeld is the edgeinfer_features bit by which a module asks for
// held inputs.
const FeatureHeld = 1

// instance is one instantiated module with its exports resolved.
type instance struct {
	mod    api.Module
	mem    api.Memory
	alloc  api.Function
	run    api.Function
	stderr *tail
	stack  [2]uint64
}

var (
	cacheMu sync.Mutex
	caches  = map[string]wazero.CompilationCache{}
)

// compilationCache returns the process's one cache for dir: wazero's file
// cache may be shared by runtimes, and sharing it keeps one writer per file.
func compilationCache(dir string) (wazero.CompilationCache, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if c, ok := caches[dir]; ok {
		return c, nil
	}
	c, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, fmt.Errorf("plugin: compilation cache %s: %w", dir, err)
	}
	caches[dir] = c
	return c, nil
}

func cacheDir(c Config) (string, error) {
	switch c.CacheDir {
	case "-":
		return "", nil
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			return "", nil // no home: run without the disk cache
		}
		return filepath.Join(base, "edgeinfer", "wazero"), nil
	}
	return c.CacheDir, nil
}

// LoadFile reads and loads a .wasm file; the plugin's name is the file's.
func LoadFile(ctx context.Context, path string, cfg Config) (*Plugin, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plugin: %w", err)
	}
	return Load(ctx, filepath.Base(path), wasm, cfg)
}

// Load compiles wasm (through the disk cache), checks that it implements
// the ABI and starts one instance, so that a module that cannot serve is
// refused here rather than on the first request.
func Load(ctx context.Context, name string, wasm []byte, cfg Config) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(wasm)
	p := &Plugin{name: name, cfg: cfg,
		slots: make(chan struct{}, cfg.maxInstances()),
		idle:  make(chan *instance, cfg.maxInstances()),
		done:  make(chan struct{}),
		info:  Info{Name: name, SHA256: hex.EncodeToString(sum[:]), Engine: resolveEngine(cfg.Engine), Wazero: wazeroVersion()},
	}
	rc := wazero.NewRuntimeConfigInterpreter()
	if p.info.Engine == EngineCompiler {
		if !CompilerSupported() {
			return nil, fmt.Errorf("%w: engine %q: wazero has no compiler for this platform", ErrConfig, cfg.Engine)
		}
		rc = wazero.NewRuntimeConfigCompiler()
	}
	rc = rc.WithCloseOnContextDone(!cfg.NoInterrupt).WithMemoryLimitPages(uint32(cfg.memoryBytes() / 65536))
	dir, err := cacheDir(cfg)
	if err != nil {
		return nil, err
	}
	if dir != "" {
		cc, err := compilationCache(dir)
		if err != nil {
			return nil, err
		}
		rc = rc.WithCompilationCache(cc)
	}
	p.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, p.rt); err != nil {
		return nil, errors.Join(fmt.Errorf("plugin: wasi: %w", err), p.rt.Close(ctx))
	}
	if err := p.instantiateHost(ctx, p.rt); err != nil {
		return nil, errors.Join(fmt.Errorf("plugin: host primitives: %w", err), p.rt.Close(ctx))
	}
	start := time.Now()
	p.compiled, err = p.rt.CompileModule(ctx, wasm)
	p.info.Compile = time.Since(start)
	if err != nil {
		if strings.Contains(err.Error(), "over limit of") {
			// wazero checks the module's declared memory against the cap
			// when it compiles.
			return nil, errors.Join(fmt.Errorf("%w: plugin %s: its memory is over the cap of %d MiB (MemoryMB, --memory-mb): %v", ErrMemory, name, p.cfg.memoryBytes()>>20, err), p.rt.Close(ctx))
		}
		return nil, errors.Join(fmt.Errorf("%w: %s: %v", ErrABI, name, err), p.rt.Close(ctx))
	}
	if err := checkExports(p.compiled); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", name, err), p.rt.Close(ctx))
	}
	p.modCfg = moduleConfig(cfg.Grants)

	start = time.Now()
	in, err := p.instantiate(ctx)
	p.info.Instantiate = time.Since(start)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("plugin %s: %w", name, err), p.rt.Close(ctx))
	}
	p.info.InstanceMemory = uint64(in.mem.Size())
	if f := in.mod.ExportedFunction("edgeinfer_features"); f != nil {
		v, err := f.Call(withHostCall(ctx, nil))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("plugin %s: %w", name, p.classify(ctx, in.stderr, fmt.Errorf("edgeinfer_features: %w", err))), p.rt.Close(ctx))
		}
		if unknown := uint32(v[0]) &^ FeatureHeld; unknown != 0 {
			return nil, errors.Join(fmt.Errorf("%w: %s asks for features %#x this host does not have (it has %#x)", ErrABI, name, unknown, FeatureHeld), p.rt.Close(ctx))
		}
		p.holds = uint32(v[0])&FeatureHeld != 0
		p.info.HeldInputs = p.holds
	}
	p.idle <- in
	return p, nil
}

// moduleConfig is the sandbox: nothing but what g grants.
func moduleConfig(g Grants) wazero.ModuleConfig {
	mc := wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize").WithArgs("plugin")
	if g.Clock {
		mc = mc.WithSysWalltime().WithSysNanotime().WithSysNanosleep()
	}
	if g.Random {
		mc = mc.WithRandSource(rand.Reader)
	}
	if len(g.Dirs) > 0 {
		fc := wazero.NewFSConfig()
		for _, m := range g.Dirs {
			fc = fc.WithReadOnlyDirMount(m.Host, m.Guest)
		}
		mc = mc.WithFSConfig(fc)
	}
	return mc
}

// checkExports refuses a module without the ABI's exports, or a command
// module (it exports _start: its main would run and exit).
func checkExports(m wazero.CompiledModule) error {
	want := map[string][2][]api.ValueType{
		"edgeinfer_abi_version": {nil, {api.ValueTypeI32}},
		"edgeinfer_alloc":       {{api.ValueTypeI32}, {api.ValueTypeI32}},
		"edgeinfer_run":         {{api.ValueTypeI32, api.ValueTypeI32}, {api.ValueTypeI64}},
	}
	fns := m.ExportedFunctions()
	for name, sig := range want {
		f, ok := fns[name]
		if !ok {
			return fmt.Errorf("%w: no export %s", ErrABI, name)
		}
		if !sameTypes(f.ParamTypes(), sig[0]) || !sameTypes(f.ResultTypes(), sig[1]) {
			return fmt.Errorf("%w: %s has signature %v -> %v, want %v -> %v", ErrABI, name, f.ParamTypes(), f.ResultTypes(), sig[0], sig[1])
		}
	}
	if f, ok := fns["edgeinfer_features"]; ok && (len(f.ParamTypes()) != 0 || !sameTypes(f.ResultTypes(), []api.ValueType{api.ValueTypeI32})) {
		return fmt.Errorf("%w: edgeinfer_features has signature %v -> %v, want [] -> [i32]", ErrABI, f.ParamTypes(), f.ResultTypes())
	}
	if _, ok := fns["_start"]; ok {
		return fmt.Errorf("%w: it is a command module (exports _start); build a reactor: go build -buildmode=c-shared", ErrABI)
	}
	if _, ok := m.ExportedMemories()["memory"]; !ok {
		return fmt.Errorf("%w: no exported memory \"memory\"", ErrABI)
	}
	return nil
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// instantiate starts an instance: the guest's _initialize runs under the
// start limit (Config.StartTimeout; the per-call limit, which may be
// tighter, is for requests), within ctx.
func (p *Plugin) instantiate(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, p.cfg.startTimeout(),
		&limitError{what: "its start (_initialize)", limit: "start limit", d: p.cfg.startTimeout()})
	defer cancel()
	ctx = withHostCall(ctx, nil)
	t := &tail{}
	mod, err := p.rt.InstantiateModule(ctx, p.compiled, p.modCfg.WithStderr(t))
	if err != nil {
		return nil, p.classify(ctx, t, fmt.Errorf("start: %w", err))
	}
	in := &instance{mod: mod, mem: mod.Memory(), alloc: mod.ExportedFunction("edgeinfer_alloc"),
		run: mod.ExportedFunction("edgeinfer_run"), stderr: t}
	v, err := mod.ExportedFunction("edgeinfer_abi_version").Call(ctx)
	if err != nil {
		return nil, errors.Join(p.classify(ctx, t, fmt.Errorf("edgeinfer_abi_version: %w", err)), mod.Close(context.Background()))
	}
	if uint32(v[0]) != abi.Version {
		return nil, errors.Join(fmt.Errorf("%w: %s speaks ABI version %d, this host %d", ErrABI, p.name, uint32(v[0]), abi.Version), mod.Close(context.Background()))
	}
	return in, nil
}

// Info describes the plugin.
func (p *Plugin) Info() Info { return p.info }

// Name is the plugin's name (its file name for LoadFile).
func (p *Plugin) Name() string { return p.name }

// Call runs the plugin on in and returns its output tensors, which the
// caller owns (they are copied out of the module). The call is bounded by
// ctx and Config.CallTimeout; see the package errors for what can fail.
func (p *Plugin) Call(ctx context.Context, in []abi.Tensor) ([]abi.Tensor, error) {
	if err := abi.Validate(in); err != nil {
		return nil, fmt.Errorf("plugin %s: input: %w", p.name, err)
	}
	// A module that asked for held inputs gets each large one as a handle
	// it passes to the host's primitives: a recogniser's 2 MB output never
	// enters the sandbox (BenchmarkCTC, BenchmarkDB). The rest is encoded
	// straight into the module's memory: encoding into a buffer of the
	// host's first, then copying that in, cost a second pass and an
	// allocation of the request's size.
	in, held := p.hold(in)
	return p.send(ctx, abi.EncodedSize(in), held, func(dst []byte) []byte { return abi.Encode(dst[:0], in) })
}

// hold replaces the inputs of HeldMin bytes or more with handles when the
// module asked for it, and returns their data by handle (handle i+1 is
// held[i]). The caller's tensors are not changed.
func (p *Plugin) hold(in []abi.Tensor) ([]abi.Tensor, [][]byte) {
	if !p.holds {
		return in, nil
	}
	var out []abi.Tensor
	var held [][]byte
	for i, t := range in {
		if len(t.Data) < HeldMin {
			continue
		}
		if out == nil {
			out = slices.Clone(in)
		}
		held = append(held, t.Data)
		out[i].Data, out[i].Handle = nil, uint32(len(held))
	}
	if out == nil {
		return in, nil
	}
	return out, held
}

// CallRaw is Call on an already encoded request (nothing held).
func (p *Plugin) CallRaw(ctx context.Context, req []byte) ([]abi.Tensor, error) {
	return p.send(ctx, len(req), nil, func(dst []byte) []byte { return dst[:copy(dst, req)] })
}

// send runs a request of size bytes, which fill writes into the buffer
// the module allocated for it (and returns), with the inputs held for it.
func (p *Plugin) send(ctx context.Context, size int, held [][]byte, fill func(dst []byte) []byte) ([]abi.Tensor, error) {
	if size > 1<<31-1 {
		return nil, fmt.Errorf("plugin %s: request of %d bytes is over 2 GiB", p.name, size)
	}
	select {
	case <-p.done:
		return nil, fmt.Errorf("%w: %s", ErrClosed, p.name)
	default:
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("plugin %s: waiting for an instance: %w", p.name, ctx.Err())
	case <-p.done:
		return nil, fmt.Errorf("%w: %s", ErrClosed, p.name)
	}
	defer func() { <-p.slots }()

	var in *instance
	select {
	case in = <-p.idle:
	default:
		var err error
		if in, err = p.instantiate(ctx); err != nil {
			return nil, fmt.Errorf("plugin %s: %w", p.name, err)
		}
	}
	cctx, cancel := context.WithTimeoutCause(ctx, p.cfg.callTimeout(),
		&limitError{what: "the call", limit: "per-call limit", d: p.cfg.callTimeout()})
	defer cancel()
	out, keep, err := p.call(cctx, in, size, held, fill)
	if keep {
		select {
		case p.idle <- in:
		default:
			_ = in.mod.Close(context.Background())
		}
	} else {
		_ = in.mod.Close(context.Background())
	}
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", p.name, err)
	}
	return out, nil
}

// call runs one request of size bytes, written by fill, in in; keep
// reports whether in may serve again.
func (p *Plugin) call(ctx context.Context, in *instance, size int, held [][]byte, fill func(dst []byte) []byte) (_ []abi.Tensor, keep bool, _ error) {
	in.stderr.reset()
	ctx = withHostCall(ctx, held)
	s := in.stack[:]
	s[0] = uint64(size)
	if err := in.alloc.CallWithStack(ctx, s); err != nil {
		return nil, false, p.classify(ctx, in.stderr, fmt.Errorf("edgeinfer_alloc: %w", err))
	}
	ptr := uint32(s[0])
	// no guest code runs between the allocation and the run: the view
	// stays valid while fill writes the request into it
	dst, ok := in.mem.Read(ptr, uint32(size))
	if ptr == 0 || !ok {
		return nil, false, fmt.Errorf("%w: edgeinfer_alloc(%d) returned address %d, outside the module's %d bytes of memory", ErrResult, size, ptr, in.mem.Size())
	}
	if w := fill(dst); len(w) != size || (size > 0 && &w[0] != &dst[0]) {
		return nil, false, fmt.Errorf("plugin %s: the request encoded to %d bytes, not the %d it was sized at", p.name, len(w), size)
	}
	s[0], s[1] = uint64(ptr), uint64(size)
	if err := in.run.CallWithStack(ctx, s); err != nil {
		return nil, false, p.classify(ctx, in.stderr, fmt.Errorf("edgeinfer_run: %w", err))
	}
	rp, rl := uint32(s[0]>>32), uint32(s[0])
	if rl > p.cfg.maxResult() {
		return nil, false, fmt.Errorf("%w: response of %d bytes is over the %d MiB cap", ErrResult, rl, p.cfg.maxResult()>>20)
	}
	view, ok := in.mem.Read(rp, rl)
	if !ok {
		return nil, false, fmt.Errorf("%w: response at %d..%d is outside the module's %d bytes of memory", ErrResult, rp, uint64(rp)+uint64(rl), in.mem.Size())
	}
	// Copy out: the module reuses (or a hostile one rewrites) its memory.
	resp := make([]byte, len(view))
	copy(resp, view)
	out, err := abi.Decode(resp)
	var ge *abi.GuestError
	switch {
	case errors.As(err, &ge):
		return nil, true, fmt.Errorf("%w: %s", ErrGuest, ge.Msg)
	case err != nil:
		return nil, false, fmt.Errorf("%w: %w", ErrResult, err)
	}
	// An output may name a held input: that input returned unchanged (a
	// pre plugin passing the image on to post), copied as the rest of the
	// response is (the caller owns its outputs, not its inputs' bytes).
	if err := (&hostCall{held: held}).resolve(out, true); err != nil {
		return nil, false, fmt.Errorf("%w: output %w", ErrResult, err)
	}
	return out, true, nil
}

// limitError is the cause of a context this package bounds: which limit
// fired, so that a timeout names it (wrapping context.DeadlineExceeded).
type limitError struct {
	what, limit string
	d           time.Duration
}

func (e *limitError) Error() string {
	return fmt.Sprintf("%s ran past its %s of %v", e.what, e.limit, e.d)
}

func (e *limitError) Unwrap() error { return context.DeadlineExceeded }

// classify maps a failed wazero call to the package's errors.
func (p *Plugin) classify(ctx context.Context, t *tail, err error) error {
	select {
	case <-p.done:
		return fmt.Errorf("%w: %v", ErrClosed, err)
	default:
	}
	if ctx.Err() != nil {
		var le *limitError
		if cause := context.Cause(ctx); errors.As(cause, &le) {
			return fmt.Errorf("%w: %w", ErrTimeout, le)
		}
		return fmt.Errorf("%w: stopped by the request's deadline or cancellation: %w", ErrTimeout, ctx.Err())
	}
	msg := ""
	if t != nil {
		msg = t.summary()
	}
	if msg != "" {
		err = fmt.Errorf("%w; stderr: %s", err, msg)
	}
	if containsOOM(msg) || containsOOM(err.Error()) {
		return fmt.Errorf("%w (cap %d MiB): %w", ErrMemory, p.cfg.memoryBytes()>>20, err)
	}
	return fmt.Errorf("%w: %w", ErrTrap, err)
}

// Close closes every instance and the runtime; calls in flight fail with
// ErrClosed. It is idempotent.
func (p *Plugin) Close(ctx context.Context) error {
	p.closing.Do(func() {
		close(p.done)
		p.closeErr = p.rt.Close(ctx)
	})
	return p.closeErr
}

func wazeroVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				return d.Version
			}
		}
	}
	return "unknown"
}
