package bundle

import (
	"fmt"
	"path"
)

// Plugins are a model's sandboxed pre- and post-processing modules
// (runtime/plugin): pre turns a request (an encoded image, say) into the
// model's inputs, post turns the model's outputs into results. Both are
// bundle files, verified like every other, so an update ships model and
// code together. A decoder's plugins work on text around Generate: pre
// gets and returns the string tensor "prompt", post gets the whole output
// as "text" (runtime/engine, generate_plugins.go).
type Plugins struct {
	Pre  *PluginRef `json:"pre,omitempty"`
	Post *PluginRef `json:"post,omitempty"`
}

// PluginRef is one plugin and what its sandbox grants.
type PluginRef struct {
	// File is the .wasm module, one of the manifest's files.
	File string `json:"file"`
	// SHA256 repeats the file's digest so that the plugin entry cannot be
	// pointed at other bytes than the ones reviewed; it must equal the
	// files entry.
	SHA256 string `json:"sha256"`
	// Args reach the plugin as string tensors "arg.<key>".
	Args map[string]string `json:"args,omitempty"`
	// Dirs are bundle directories mounted read-only for the plugin.
	Dirs []PluginDir `json:"dirs,omitempty"`
	// Clock and Random grant the host clock and crypto randomness (by
	// default the plugin sees a fake clock and a deterministic source).
	Clock  bool `json:"clock,omitempty"`
	Random bool `json:"random,omitempty"`
	// MemoryMB caps the plugin's memory (0: the host default, 64).
	MemoryMB int `json:"memory_mb,omitempty"`
	// TimeoutMS bounds one call (0: the host default, 2000).
	TimeoutMS int `json:"timeout_ms,omitempty"`
}

// PluginDir mounts the bundle directory Dir at Guest (absolute) inside
// the plugin, read-only.
type PluginDir struct {
	Dir   string `json:"dir"`
	Guest string `json:"guest"`
}

func (p *Plugins) validate(files map[string]File) error {
	for _, s := range []struct {
		stage string
		ref   *PluginRef
	}{{"pre", p.Pre}, {"post", p.Post}} {
		r := s.ref
		if r == nil {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s plugin %q: %s", ErrManifest, s.stage, r.File, fmt.Sprintf(format, args...))
		}
		f, ok := files[r.File]
		if !ok {
			return bad("not among the files")
		}
		if r.SHA256 != f.SHA256 {
			return bad("sha256 %s differs from the file's %s", r.SHA256, f.SHA256)
		}
		for _, d := range r.Dirs {
			if !SafePath(d.Dir) && d.Dir != "." {
				return bad("dir %q must be relative, clean and inside the bundle", d.Dir)
			}
			if !path.IsAbs(d.Guest) || path.Clean(d.Guest) != d.Guest || d.Guest == "/" {
				return bad("guest path %q must be absolute, clean and not /", d.Guest)
			}
		}
		if r.MemoryMB < 0 || r.MemoryMB > 4095 || r.TimeoutMS < 0 {
			return bad("memory_mb %d, timeout_ms %d", r.MemoryMB, r.TimeoutMS)
		}
	}
	return nil
}
