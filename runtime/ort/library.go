package ort

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// RuntimeVersion is the ONNX Runtime release that `make setup` installs into
// the per-user cache and that the search below looks for.
const RuntimeVersion = "1.30.0"

// LibraryEnv is the environment variable that points at a specific ONNX
// Runtime shared library (a vendor GPU/NPU build, a JetPack build, ...).
const LibraryEnv = "ONNXRUNTIME_LIB"

// libraryFileName is the file name `make setup` installs for this OS.
func libraryFileName() string {
	if runtime.GOOS == "darwin" {
		return "libonnxruntime.1.dylib"
	}
	return "libonnxruntime.so.1"
}

// CachedLibraryPath is where `make setup` installs the library for this
// process's OS and architecture: $XDG_CACHE_HOME (or ~/.cache)
// /edgeinfer/onnxruntime/<version>/<goos>-<goarch>/.
func CachedLibraryPath() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "edgeinfer", "onnxruntime", RuntimeVersion,
		runtime.GOOS+"-"+runtime.GOARCH, libraryFileName())
}

// systemLibraryPaths are the usual install locations of a distribution or
// vendor package (JetPack, Debian, /usr/local builds).
func systemLibraryPaths() []string {
	if runtime.GOOS == "darwin" {
		return []string{"/opt/homebrew/lib/libonnxruntime.dylib", "/usr/local/lib/libonnxruntime.dylib"}
	}
	var triple string
	switch runtime.GOARCH {
	case "amd64":
		triple = "x86_64-linux-gnu"
	case "arm64":
		triple = "aarch64-linux-gnu"
	case "arm":
		triple = "arm-linux-gnueabihf"
	}
	var out []string
	for _, dir := range []string{"/usr/local/lib", "/usr/lib/" + triple, "/usr/lib"} {
		if strings.HasSuffix(dir, "/") {
			continue
		}
		out = append(out, filepath.Join(dir, "libonnxruntime.so.1"), filepath.Join(dir, "libonnxruntime.so"))
	}
	return out
}

// FindLibrary returns the path of the ONNX Runtime shared library to load.
//
// An explicit path, or else $ONNXRUNTIME_LIB, is used as given: when it is
// wrong the error says why (missing, a directory, another architecture)
// rather than silently falling back to another library. Without either, the
// per-user cache of `make setup` and then the system paths are searched; the
// error then lists every place tried and how to fix it.
func FindLibrary(explicit string) (string, error) {
	if explicit != "" {
		if err := checkLibrary(explicit); err != nil {
			return "", fmt.Errorf("ort: library path %q: %w", explicit, err)
		}
		return explicit, nil
	}
	if env := os.Getenv(LibraryEnv); env != "" {
		if err := checkLibrary(env); err != nil {
			return "", fmt.Errorf("ort: %s=%q: %w", LibraryEnv, env, err)
		}
		return env, nil
	}
	var tried []string
	candidates := append([]string{CachedLibraryPath()}, systemLibraryPaths()...)
	for _, p := range candidates {
		if p == "" {
			continue
		}
		err := checkLibrary(p)
		if err == nil {
			return p, nil
		}
		tried = append(tried, fmt.Sprintf("  %s: %v", p, trimSentinel(err)))
		if errors.Is(err, ErrLibraryArch) {
			// A wrong-architecture file in a standard place is worth
			// reporting on its own even if a later candidate is missing.
			continue
		}
	}
	return "", fmt.Errorf("%w for %s/%s; tried:\n%s\n%s not set; run `make setup` to install ONNX Runtime %s into %s, or set %s to a library built for this machine",
		ErrLibraryNotFound, runtime.GOOS, runtime.GOARCH, strings.Join(tried, "\n"), LibraryEnv,
		RuntimeVersion, filepath.Dir(CachedLibraryPath()), LibraryEnv)
}

// trimSentinel drops the sentinel's own text from a wrapped error so the
// list of tried places stays readable.
func trimSentinel(err error) string {
	s := err.Error()
	for _, sentinel := range []error{ErrLibraryNotFound, ErrLibraryArch} {
		s = strings.TrimPrefix(s, sentinel.Error()+": ")
	}
	return s
}

// checkLibrary reports why path cannot be this process's ONNX Runtime
// library: missing, a directory, unreadable, or an ELF file for another
// machine. dlopen would report all of these as "no such file" or an opaque
// "wrong ELF class", so the ELF header is read here first.
func checkLibrary(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: no such file", ErrLibraryNotFound)
	case err != nil:
		return fmt.Errorf("%w: %v", ErrLibraryNotFound, err)
	case st.IsDir():
		return fmt.Errorf("%w: is a directory, not a shared library (point it at %s inside it)", ErrLibraryNotFound, libraryFileName())
	}
	if runtime.GOOS == "darwin" {
		return nil
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%w: not an ELF shared library: %v", ErrLibraryLoad, err)
	}
	defer f.Close()
	want, ok := elfMachines[runtime.GOARCH]
	if ok && f.Machine != want {
		return fmt.Errorf("%w: is %s library but this process is %s; use the %s build (make setup installs it under %s)",
			ErrLibraryArch, describeMachine(f.Machine), describeGOARCH(runtime.GOARCH),
			runtime.GOOS+"-"+runtime.GOARCH, filepath.Dir(CachedLibraryPath()))
	}
	return nil
}

var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"arm":     elf.EM_ARM,
	"386":     elf.EM_386,
	"riscv64": elf.EM_RISCV,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
}

func describeMachine(m elf.Machine) string {
	switch m {
	case elf.EM_X86_64:
		return "an x86-64 (amd64)"
	case elf.EM_AARCH64:
		return "an aarch64 (arm64)"
	case elf.EM_ARM:
		return "a 32-bit arm"
	case elf.EM_386:
		return "an i386"
	case elf.EM_RISCV:
		return "a riscv"
	}
	return "a " + m.String()
}

func describeGOARCH(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86-64"
	case "arm64":
		return "aarch64 (arm64)"
	case "arm":
		return "32-bit arm"
	}
	return goarch
}
