// Package plugintest builds plugins from Go source for tests: each test
// that needs a .wasm calls Build, which runs the standard toolchain
// (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared) into the same
// build directory `make plugins` fills, and skips the build when the
// module is newer than every Go file of runtime/plugin.
package plugintest

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Dir is the build directory: $EDGEINFER_PLUGIN_DIR, else build/plugins
// under the module root (what `make plugins` writes; not committed).
func Dir(tb testing.TB) string {
	if d := os.Getenv("EDGEINFER_PLUGIN_DIR"); d != "" {
		return d
	}
	return filepath.Join(Root(tb), "build", "plugins")
}

// Root is the module's root directory.
func Root(tb testing.TB) string {
	tb.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		tb.Fatalf("plugintest: go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

var mu sync.Mutex

// Build builds the plugin in pkg (a directory relative to the module
// root, e.g. "runtime/plugin/plugins/ctc") and returns the .wasm path,
// named after the directory.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	root := Root(tb)
	out := filepath.Join(Dir(tb), filepath.Base(pkg)+".wasm")
	if fresh(out, []string{filepath.Join(root, "runtime", "plugin")}, ".go") {
		return out
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./"+filepath.ToSlash(pkg))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("plugintest: build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// fresh reports whether out exists and is newer than every source file
// (ending in one of exts, tests excepted) under srcs.
func fresh(out string, srcs []string, exts ...string) bool {
	st, err := os.Stat(out)
	if err != nil {
		return false
	}
	newer := false
	for _, src := range srcs {
		_ = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil || newer {
				return filepath.SkipDir
			}
			if !d.IsDir() && slices.ContainsFunc(exts, func(e string) bool { return strings.HasSuffix(p, e) }) && !strings.HasSuffix(p, "_test.go") {
				if fi, err := d.Info(); err == nil && fi.ModTime().After(st.ModTime()) {
					newer = true
				}
			}
			return nil
		})
	}
	return !newer
}

// CToolchain is the C compiler command for wasm32-wasi plugins and the
// reason it cannot be used here ("" when it can): Debian's clang with lld,
// wasi-libc and the wasm32 compiler runtime.
func CToolchain() (clang []string, missing string) {
	clang = []string{"clang", "--target=wasm32-wasi", "--sysroot=/usr", "-O2", "-mexec-model=reactor"}
	if _, err := exec.LookPath("clang"); err != nil {
		return nil, "clang not installed (apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32)"
	}
	if _, err := exec.LookPath("wasm-ld"); err != nil {
		return nil, "lld (wasm-ld) not installed (apt-get install lld)"
	}
	if _, err := os.Stat("/usr/lib/wasm32-wasi/libc.a"); err != nil {
		return nil, "wasi-libc not installed (apt-get install wasi-libc)"
	}
	return clang, ""
}

// BuildC builds the C plugin in dir (relative to the module root, e.g.
// "runtime/plugin/plugins/c/blazeface": its .c files with the C guest kit
// runtime/plugin/guest/c) and returns the .wasm path, named after the
// directory with "-c" (blazeface-c.wasm), as `make plugins` names it. It
// skips the test when the toolchain is missing, saying what to install.
func BuildC(tb testing.TB, dir string) string {
	tb.Helper()
	clang, missing := CToolchain()
	if missing != "" {
		tb.Skip("C plugins: " + missing)
	}
	mu.Lock()
	defer mu.Unlock()
	root := Root(tb)
	kit := filepath.Join(root, "runtime", "plugin", "guest", "c")
	out := filepath.Join(Dir(tb), filepath.Base(dir)+"-c.wasm")
	srcs, _ := filepath.Glob(filepath.Join(root, dir, "*.c"))
	if len(srcs) == 0 {
		tb.Fatalf("plugintest: no .c files in %s", dir)
	}
	if fresh(out, []string{kit, filepath.Join(root, dir)}, ".c", ".h") {
		return out
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		tb.Fatal(err)
	}
	args := append(clang[1:], "-Wall", "-Werror", "-I", kit, "-o", out, filepath.Join(kit, "edgeinfer_plugin.c"))
	args = append(append(args, srcs...), "-lm")
	if b, err := exec.Command(clang[0], args...).CombinedOutput(); err != nil {
		tb.Fatalf("plugintest: build %s: %v\n%s", dir, err, b)
	}
	return out
}
