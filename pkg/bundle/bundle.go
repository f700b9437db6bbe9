package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Bundle is a loaded, verified bundle. It is immutable after Load and safe
// for concurrent use.
type Bundle struct {
	Dir      string
	Manifest Manifest
}

// Path returns the absolute-or-relative path of a bundle file.
func (b *Bundle) Path(name string) string { return filepath.Join(b.Dir, filepath.FromSlash(name)) }

// ModelPath returns the path of the ONNX model.
func (b *Bundle) ModelPath() string { return b.Path(b.Manifest.Model) }

// TokenizerPath returns the tokenizer's path, or "" when the bundle has none.
func (b *Bundle) TokenizerPath() string {
	if b.Manifest.Tokenizer == "" {
		return ""
	}
	return b.Path(b.Manifest.Tokenizer)
}

// Load reads dir/edgeinfer.json, validates it and verifies the size and
// sha256 of every file it lists. A mismatch wraps ErrChecksum and names
// the file; a listed file that is absent wraps ErrMissingFile.
func Load(dir string) (*Bundle, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		if err := verify(dir, f); err != nil {
			return nil, err
		}
	}
	return &Bundle{Dir: dir, Manifest: *m}, nil
}

func verify(dir string, f File) error {
	got, err := hashFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrMissingFile, f.Path)
	}
	if err != nil {
		return fmt.Errorf("bundle: %s: %w", f.Path, err)
	}
	if got.Size != f.Size {
		return fmt.Errorf("%w: %s is %d bytes, manifest says %d", ErrChecksum, f.Path, got.Size, f.Size)
	}
	if got.SHA256 != f.SHA256 {
		return fmt.Errorf("%w: %s has sha256 %s, manifest says %s", ErrChecksum, f.Path, got.SHA256, f.SHA256)
	}
	return nil
}

func hashFile(path string) (File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return File{}, err
	}
	defer fh.Close()
	h := sha256.New()
	n, err := io.Copy(h, fh)
	if err != nil {
		return File{}, err
	}
	return File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Write seals dir: it hashes each named file (paths relative to dir, slash
// separated), sets m.Files and m.Format, validates m and writes
// dir/edgeinfer.json.
func Write(dir string, m *Manifest, files ...string) error {
	m.Format = FormatVersion
	m.Files = m.Files[:0]
	for _, name := range files {
		f, err := hashFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return fmt.Errorf("bundle: %s: %w", name, err)
		}
		f.Path = name
		m.Files = append(m.Files, f)
	}
	if err := m.Validate(); err != nil {
		return err
	}
	data, err := m.Marshal()
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ManifestFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ManifestFile)); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return nil
}
