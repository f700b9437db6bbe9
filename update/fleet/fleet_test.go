package fleet_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

func randBytes(seed uint64, n int) []byte {
	var key [32]byte
	key[0] = byte(seed)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

func writeBundle(t *testing.T, version string, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	var names []string
	for p, b := range files {
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
	}
	m := &bundle.Manifest{Name: "m", Version: version, Kind: bundle.KindOneShot, Model: "model.onnx", Quantization: "fp32", CreatedBy: "fleet test"}
	if err := bundle.Write(dir, m, names...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPublishDedup: a release that shares a layer with an earlier one
// stores only the new layer's chunks; publishing from a store that holds
// the same bytes stores nothing; counters count up; reopening the
// repository with only the online keys can publish, and cannot rotate the
// root.
func TestPublishDedup(t *testing.T) {
	ctx := context.Background()
	dir, keys, rootKeys := t.TempDir(), t.TempDir(), t.TempDir()
	r, err := fleet.Init(dir, keys, rootKeys, fleet.InitOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	shared := randBytes(1, 3<<20)
	rel1, s1, err := r.Publish(ctx, writeBundle(t, "1", map[string][]byte{"model.onnx": shared, "b.bin": randBytes(2, 1<<20)}), fleet.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s1.NewBytes != s1.Bytes || rel1.Counter != 1 {
		t.Fatalf("first publish stored %d of %d bytes, counter %d", s1.NewBytes, s1.Bytes, rel1.Counter)
	}
	r, err = fleet.Open(dir, fleet.InitOptions{}, nil, keys) // online keys only
	if err != nil {
		t.Fatal(err)
	}
	b2 := writeBundle(t, "2", map[string][]byte{"model.onnx": shared, "b.bin": randBytes(3, 1<<20)})
	rel2, s2, err := r.Publish(ctx, b2, fleet.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rel2.Counter != 2 || s2.NewBytes > 1<<20+4096 || s2.NewBytes < 1<<20 {
		t.Fatalf("second publish: counter %d, stored %d bytes for a 1 MiB change", rel2.Counter, s2.NewBytes)
	}
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "s.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Import(ctx, b2, nil); err != nil {
		t.Fatal(err)
	}
	// The same version again, from a store: same chunks, same target.
	rel3, s3, err := r.PublishFromStore(ctx, st, "m@2", fleet.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s3.NewBytes != 0 || rel3.Counter != 2 {
		t.Fatalf("republishing from a store stored %d bytes, counter %d (want 0 bytes, the same counter 2)", s3.NewBytes, rel3.Counter)
	}
	if err := r.RotateRoot(fleet.RotateOptions{Repo: "image", Roles: []string{"targets"}, KeyDir: keys}); !errors.Is(err, fleet.ErrKeys) {
		t.Fatalf("root rotation without the offline root keys: %v", err)
	}
	if err := r.RefreshTimestamp("image"); err != nil {
		t.Fatal(err)
	}
}
