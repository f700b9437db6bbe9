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
	if fresh(out, filepath.Join(root, "runtime", "plugin")) {
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

// fresh reports whether out exists and is newer than every .go file
// under src.
func fresh(out, src string) bool {
	st, err := os.Stat(out)
	if err != nil {
		return false
	}
	newer := false
	_ = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || newer {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			if fi, err := d.Info(); err == nil && fi.ModTime().After(st.ModTime()) {
				newer = true
			}
		}
		return nil
	})
	return !newer
}
