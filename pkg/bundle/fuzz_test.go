package bundle

import "testing"

// FuzzParseManifest: a manifest arrives in updates; whatever its bytes,
// ParseManifest returns a manifest that validates, or an error.
func FuzzParseManifest(f *testing.F) {
	sum := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	m := &Manifest{Format: FormatVersion, Name: "faces", Version: "1", Kind: KindOneShot, Model: "model.onnx", Quantization: "fp32",
		Files:   []File{{Path: "model.onnx", Size: 1, SHA256: sum}, {Path: "post.wasm", Size: 1, SHA256: sum}},
		Plugins: &Plugins{Post: &PluginRef{File: "post.wasm", SHA256: sum, Args: map[string]string{"k": "v"}, Dirs: []PluginDir{{Dir: "dict", Guest: "/dict"}}}}}
	seed, _ := m.Marshal()
	f.Add(seed)
	f.Add([]byte(`{"format":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed manifest fails Validate: %v", err)
		}
	})
}
