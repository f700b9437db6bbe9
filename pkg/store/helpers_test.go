package store

import (
	"context"
	"encoding/json"
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

// writeBundle writes a bundle directory with an edgeinfer.json naming
// name@version and the given files.
func writeBundle(t testing.TB, dir, name, version string, files map[string][]byte) {
	t.Helper()
	m, err := json.Marshal(map[string]any{"name": name, "version": version, "kind": "oneshot"})
	if err != nil {
		t.Fatal(err)
	}
	all := map[string][]byte{ManifestFile: m}
	for p, b := range files {
		all[p] = b
	}
	for p, b := range all {
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
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
