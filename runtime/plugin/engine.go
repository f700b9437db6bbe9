package plugin

import (
	"runtime"

	"golang.org/x/sys/cpu"
)

// CompilerSupported reports whether wazero has a compiler for this
// platform: the same rule as wazero's own auto choice (its
// internal/platform.CompilerSupported, which is not importable), so that
// the engine Info reports is the one that runs.
func CompilerSupported() bool {
	switch runtime.GOOS {
	case "linux", "darwin", "freebsd", "netbsd", "windows":
		if runtime.GOARCH == "arm64" {
			return true
		}
		return runtime.GOARCH == "amd64" && cpu.X86.HasSSE41
	case "dragonfly", "solaris", "illumos":
		return runtime.GOARCH == "amd64" && cpu.X86.HasSSE41
	}
	return false
}

// resolveEngine turns EngineAuto into what runs here.
func resolveEngine(e string) string {
	if e == EngineAuto {
		if CompilerSupported() {
			return EngineCompiler
		}
		return EngineInterpreter
	}
	return e
}

// Runtime describes what runs plugins in this build on this machine, for
// version matrices: "wazero v1.12.0, compiler" (or ", interpreter").
func Runtime() string { return "wazero " + wazeroVersion() + ", " + resolveEngine(EngineAuto) }
