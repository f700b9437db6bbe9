package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// randBytes returns n deterministic pseudo-random bytes for seed.
func randBytes(seed uint64, n int) []byte {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// writeBundle writes a bundle directory holding the given files and seals
// it with an edgeinfer.json naming name@version.
func writeBundle(t testing.TB, dir, name, version string, files map[string][]byte) {
	t.Helper()
	for p, b := range files {
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sealBundle(t, dir, name, version)
}

// sealBundle writes dir/edgeinfer.json naming name@version and listing
// every file in dir (symlinks followed) with its size and sha256, as
// pkg/bundle does.
func sealBundle(t testing.TB, dir, name, version string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	}
	files := []entry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == ManifestFile {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return nil // a dangling link: the test's business
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		files = append(files, entry{filepath.ToSlash(rel), n, hex.EncodeToString(h.Sum(nil))})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := json.Marshal(map[string]any{"name": name, "version": version, "kind": "oneshot", "files": files})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), m, 0o644); err != nil {
		t.Fatal(err)
	}
}

func openTestStore(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// importFiles writes a bundle under a temp dir and imports it.
func importFiles(t testing.TB, s *Store, name, version string, files map[string][]byte) Ref {
	t.Helper()
	dir := t.TempDir()
	writeBundle(t, dir, name, version, files)
	r, err := s.Import(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
