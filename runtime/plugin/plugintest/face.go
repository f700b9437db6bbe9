package plugintest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
)

// FaceBundle writes a one-shot bundle of the BlazeFace detector with its
// plugins (imageprep before, blazeface after, a minute per call each) and
// returns its directory and the path of the Muybridge photo it detects a
// face in. It skips the test when `make setup` has not fetched them.
func FaceBundle(tb testing.TB) (dir, photo string) {
	tb.Helper()
	base, _ := os.UserCacheDir()
	root := filepath.Join(base, "edgeinfer", "models")
	model := filepath.Join(root, "blazeface", "face_detection_front_128x128_barracuda.onnx")
	photo = filepath.Join(root, "images", "locomotion-nude-male.jpg")
	for _, f := range []string{model, photo} {
		if _, err := os.Stat(f); err != nil {
			tb.Skipf("no %s (run make setup)", f)
		}
	}
	dir = tb.TempDir()
	put := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	put(model, "model.onnx")
	put(Build(tb, "runtime/plugin/plugins/imageprep"), "pre.wasm")
	put(Build(tb, "runtime/plugin/plugins/blazeface"), "post.wasm")
	m := &bundle.Manifest{Name: "faces", Version: "1", Kind: bundle.KindOneShot, Model: "model.onnx", Quantization: "fp32"}
	files := []string{"model.onnx", "pre.wasm", "post.wasm"}
	if err := bundle.Write(dir, m, files...); err != nil {
		tb.Fatal(err)
	}
	sum := map[string]string{}
	for _, f := range m.Files {
		sum[f.Path] = f.SHA256
	}
	m.Plugins = &bundle.Plugins{
		Pre:  &bundle.PluginRef{File: "pre.wasm", SHA256: sum["pre.wasm"], Args: map[string]string{"output": "input:0"}, TimeoutMS: 60000},
		Post: &bundle.PluginRef{File: "post.wasm", SHA256: sum["post.wasm"], Args: map[string]string{"threshold": "0.5"}, TimeoutMS: 60000},
	}
	if err := bundle.Write(dir, m, files...); err != nil {
		tb.Fatal(err)
	}
	return dir, photo
}
