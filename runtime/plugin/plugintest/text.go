package plugintest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
)

// TextBundle imports the Hugging Face checkpoint in hf (examples/tinylm)
// as decoder bundle name and ships it with the redact (pre) and jsonout
// (post) plugins, as an OTA release would; it returns the directory.
func TextBundle(tb testing.TB, hf, name string) string {
	tb.Helper()
	dir := tb.TempDir()
	if _, err := build.ImportHF(context.Background(), hf, dir, build.ImportOptions{Name: name}); err != nil {
		tb.Fatal(err)
	}
	b, err := bundle.Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for file, pkg := range map[string]string{"pre.wasm": "redact", "post.wasm": "jsonout"} {
		data, err := os.ReadFile(Build(tb, "runtime/plugin/plugins/"+pkg))
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	m := b.Manifest
	var files []string
	for _, f := range m.Files {
		files = append(files, f.Path)
	}
	files = append(files, "pre.wasm", "post.wasm")
	if err := bundle.Write(dir, &m, files...); err != nil { // digests of the plugins
		tb.Fatal(err)
	}
	sum := map[string]string{}
	for _, f := range m.Files {
		sum[f.Path] = f.SHA256
	}
	m.Plugins = &bundle.Plugins{Pre: &bundle.PluginRef{File: "pre.wasm", SHA256: sum["pre.wasm"], TimeoutMS: 60000},
		Post: &bundle.PluginRef{File: "post.wasm", SHA256: sum["post.wasm"], TimeoutMS: 60000}}
	if err := bundle.Write(dir, &m, files...); err != nil {
		tb.Fatal(err)
	}
	return dir
}
