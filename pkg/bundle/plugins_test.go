package bundle

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A bundle with a post plugin: the plugin is verified like the model, and
// bytes that differ from the manifest are refused.
func TestPluginBundle(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("model.onnx", "model")
	write("post.wasm", "\x00asm plugin")
	write("dict/keys.txt", "a\nb\n")
	m := &Manifest{Name: "ocr", Version: "1", Kind: KindOneShot, Model: "model.onnx", Quantization: "fp32"}
	if err := Write(dir, m, "model.onnx", "post.wasm", "dict/keys.txt"); err != nil {
		t.Fatal(err)
	}
	var sum string
	for _, f := range m.Files {
		if f.Path == "post.wasm" {
			sum = f.SHA256
		}
	}
	m.Plugins = &Plugins{Post: &PluginRef{File: "post.wasm", SHA256: sum, Dirs: []PluginDir{{Dir: "dict", Guest: "/dict"}}}}
	data, _ := m.Marshal()
	write(ManifestFile, string(data))
	b, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest.Plugins.Post.Dirs[0].Guest != "/dict" {
		t.Errorf("plugins %+v", b.Manifest.Plugins.Post)
	}

	write("post.wasm", "\x00asm tampered")
	if _, err := Load(dir); !errors.Is(err, ErrChecksum) {
		t.Errorf("tampered plugin: %v, want ErrChecksum", err)
	}

	for name, ref := range map[string]PluginRef{
		"other sha256": {File: "post.wasm", SHA256: "00" + sum[2:]},
		"not a file":   {File: "pre.wasm", SHA256: sum},
		"dir escapes":  {File: "post.wasm", SHA256: sum, Dirs: []PluginDir{{Dir: "../etc", Guest: "/etc"}}},
		"guest root":   {File: "post.wasm", SHA256: sum, Dirs: []PluginDir{{Dir: "dict", Guest: "/"}}},
	} {
		mm := *m
		mm.Plugins = &Plugins{Pre: &ref}
		if err := mm.Validate(); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: %v, want ErrManifest", name, err)
		}
	}
}
