package plugin

import (
	"fmt"
	"path"
	"path/filepath"
	"time"
)

// Engine names how wazero runs a module.
const (
	// EngineAuto is the compiler where the platform has one (amd64 with
	// SSE4.1 or arm64, on Linux, macOS, Windows, FreeBSD, NetBSD), the
	// interpreter otherwise.
	EngineAuto        = ""
	EngineCompiler    = "compiler"
	EngineInterpreter = "interpreter"
)

// Config configures one Plugin. It is plain data; every zero value is a
// documented default, and the zero Config is a valid, fully sandboxed one.
type Config struct {
	// Engine is EngineAuto (""), EngineCompiler or EngineInterpreter.
	Engine string `json:"engine,omitempty"`
	// CacheDir holds compiled modules so that a later start skips the
	// compilation (BenchmarkColdStart measures both). "" means the user
	// cache directory's edgeinfer/wazero; "-" turns the disk cache off.
	CacheDir string `json:"cache_dir,omitempty"`
	// MemoryMB caps each instance's linear memory; 0 means 64 MiB.
	MemoryMB int `json:"memory_mb,omitempty"`
	// CallTimeout bounds one call (the request's deadline bounds it too,
	// whichever comes first); 0 means 2 s.
	CallTimeout time.Duration `json:"call_timeout,omitempty"`
	// StartTimeout bounds an instance's start: the guest's _initialize (a
	// Go guest's runtime and package init, milliseconds on a desktop, more
	// on a small board; BenchmarkColdStart measures it). 0 means 5 s. A
	// request waiting for that start is bounded by its deadline too.
	StartTimeout time.Duration `json:"start_timeout,omitempty"`
	// MaxInstances is how many calls run at once, each in its own
	// instance; 0 means 2. Further calls wait for a free instance (or
	// their context).
	MaxInstances int `json:"max_instances,omitempty"`
	// MaxResultMB caps a response; 0 means 64 MiB.
	MaxResultMB int `json:"max_result_mb,omitempty"`
	// NoInterrupt compiles the module without wazero's cancellation
	// checks. With them (the default) every loop iteration of the guest
	// checks whether its call must stop, which is what bounds a call by
	// CallTimeout and the request's deadline; Go guests pay dearly for it
	// because the Go compiler routes every branch of a function through one
	// dispatch loop (BenchmarkInterrupt measures a tight loop with the
	// checks, without them and natively). With NoInterrupt a call cannot be stopped
	// once it runs: only for plugins the device trusts, never for a
	// bundle's plugins by default.
	NoInterrupt bool `json:"no_interrupt,omitempty"`
	// Grants are what the sandbox lets the plugin reach; the zero value
	// is nothing.
	Grants Grants `json:"grants"`
}

// Grants open the sandbox. With none, the plugin sees no files, no
// network (wazero offers no sockets unless asked to), a clock that starts
// at zero and advances 1 ms per reading, and a deterministic random source;
// its standard output is discarded and its standard error kept (the tail
// is quoted in trap errors).
type Grants struct {
	// Clock gives the host's wall and monotonic clocks.
	Clock bool `json:"clock,omitempty"`
	// Random gives crypto/rand.
	Random bool `json:"random,omitempty"`
	// Dirs are host directories mounted read-only.
	Dirs []Mount `json:"dirs,omitempty"`
}

// Mount is a read-only directory: Host on this machine seen by the
// plugin as Guest (an absolute slash path, e.g. "/dict").
type Mount struct {
	Host  string `json:"host"`
	Guest string `json:"guest"`
}

func (c Config) memoryBytes() int64 {
	if c.MemoryMB == 0 {
		return 64 << 20
	}
	return int64(c.MemoryMB) << 20
}

func (c Config) startTimeout() time.Duration {
	if c.StartTimeout == 0 {
		return 5 * time.Second
	}
	return c.StartTimeout
}

func (c Config) callTimeout() time.Duration {
	if c.CallTimeout == 0 {
		return 2 * time.Second
	}
	return c.CallTimeout
}

func (c Config) maxInstances() int {
	if c.MaxInstances == 0 {
		return 2
	}
	return c.MaxInstances
}

func (c Config) maxResult() uint32 {
	if c.MaxResultMB == 0 {
		return 64 << 20
	}
	return uint32(c.MaxResultMB) << 20
}

// Validate reports a config that cannot run: an unknown engine, a
// negative limit, memory past wasm32's 4 GiB, a mount that is not a
// read-only directory pair.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch c.Engine {
	case EngineAuto, EngineCompiler, EngineInterpreter:
	default:
		return bad("engine %q (want %q, %q or empty for auto)", c.Engine, EngineCompiler, EngineInterpreter)
	}
	if c.MemoryMB < 0 || c.MemoryMB > 4095 {
		return bad("memory_mb %d (want 1..4095, 0 for 64)", c.MemoryMB)
	}
	if c.CallTimeout < 0 || c.StartTimeout < 0 || c.MaxInstances < 0 || c.MaxResultMB < 0 || c.MaxResultMB > 1024 {
		return bad("negative limit (call_timeout %v, start_timeout %v, max_instances %d, max_result_mb %d)", c.CallTimeout, c.StartTimeout, c.MaxInstances, c.MaxResultMB)
	}
	for _, m := range c.Grants.Dirs {
		if m.Host == "" || !filepath.IsAbs(m.Host) && filepath.Clean(m.Host) != m.Host {
			return bad("mount host path %q must be a clean path", m.Host)
		}
		if !path.IsAbs(m.Guest) || path.Clean(m.Guest) != m.Guest || m.Guest == "/" {
			return bad("mount guest path %q must be an absolute clean path other than /", m.Guest)
		}
	}
	return nil
}
