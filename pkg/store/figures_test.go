package store

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFigures450 measures, on a ~450 MB bundle (the size of the
// synthetic-110m model, here a random stand-in): import and verify MB/s,
// bytes-ready load from the store against os.ReadFile of the same plain
// file, and what a second version with one twelfth rewritten adds to the
// store. Opt-in: EDGEINFER_STORE_BIG=1 (EDGEINFER_STORE_BUNDLE=DIR uses a
// real bundle instead, e.g. one built by `edgeinfer model build`).
func TestFigures450(t *testing.T) {
	if os.Getenv("EDGEINFER_STORE_BIG") == "" {
		t.Skip("set EDGEINFER_STORE_BIG=1 for the 450 MB figures")
	}
	ctx := context.Background()
	tmp := t.TempDir()
	bundle := os.Getenv("EDGEINFER_STORE_BUNDLE")
	const size = 450 << 20
	if bundle == "" {
		bundle = filepath.Join(tmp, "v1")
		writeRandomFile(t, filepath.Join(bundle, "model.onnx"), size, 60)
		sealBundle(t, bundle, "synthetic", "1")
	}
	model := filepath.Join(bundle, "model.onnx")
	s := openTestStore(t, filepath.Join(tmp, "models.db"))

	start := time.Now()
	ref, err := s.Import(ctx, bundle, nil)
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	st1, _ := s.Stats(ctx)
	t.Logf("import %s: %.0f MiB in %v = %.0f MB/s", ref, mib(st1.ChunkBytes), el.Round(time.Millisecond), float64(st1.ChunkBytes)/1e6/el.Seconds())

	start = time.Now()
	rep, err := s.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	el = time.Since(start)
	t.Logf("verify: %d chunks, %.0f MiB in %v = %.0f MB/s", rep.Chunks, mib(rep.Bytes), el.Round(time.Millisecond), float64(rep.Bytes)/1e6/el.Seconds())

	// Bytes-ready load, warm caches, best of 5 each, interleaved.
	best := func(f func() (int, error)) time.Duration {
		d := time.Duration(1 << 62)
		for range 5 {
			start := time.Now()
			if _, err := f(); err != nil {
				t.Fatal(err)
			}
			d = min(d, time.Since(start))
		}
		return d
	}
	plain := best(func() (int, error) { b, err := os.ReadFile(model); return len(b), err })
	plainHashed := best(func() (int, error) {
		b, err := os.ReadFile(model)
		sha256.Sum256(b)
		return len(b), err
	})
	stored := best(func() (int, error) { b, err := s.ReadFile(ctx, ref.String(), "model.onnx"); return len(b), err })
	t.Logf("load model.onnx bytes-ready: os.ReadFile %v, os.ReadFile+sha256 %v, store.ReadFile (copy + sha256 per chunk) %v = %.2fx plain, %.2fx plain+sha256",
		plain.Round(time.Microsecond), plainHashed.Round(time.Microsecond), stored.Round(time.Microsecond),
		float64(stored)/float64(plain), float64(stored)/float64(plainHashed))

	// Dedup: rewrite one twelfth ("one layer") in place as version 2.
	v2 := filepath.Join(tmp, "v2")
	src, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	changed := len(src) / 12
	copy(src[5*len(src)/12:], randBytes(61, changed))
	writeBundle(t, v2, ref.Name, "2", map[string][]byte{"model.onnx": src})
	src = nil
	if _, err := s.Import(ctx, v2, nil); err != nil {
		t.Fatal(err)
	}
	st2, _ := s.Stats(ctx)
	added := st2.ChunkBytes - st1.ChunkBytes
	t.Logf("dedup: version 2 with %.1f MiB rewritten added %.1f MiB of chunks = %.3fx the changed bytes", mib(int64(changed)), mib(added), float64(added)/float64(changed))
	if r := float64(added) / float64(changed); r > 1.2 {
		t.Errorf("dedup %.3fx > 1.2x", r)
	}
}

func BenchmarkReadFile(b *testing.B) {
	ctx := context.Background()
	tmp := b.TempDir()
	writeRandomFile(b, filepath.Join(tmp, "model.onnx"), 64<<20, 70)
	sealBundle(b, tmp, "m", "1")
	s := openTestStore(b, filepath.Join(b.TempDir(), "models.db"))
	if _, err := s.Import(ctx, tmp, nil); err != nil {
		b.Fatal(err)
	}
	b.Run("store", func(b *testing.B) {
		b.SetBytes(64 << 20)
		for b.Loop() {
			if _, err := s.ReadFile(ctx, "m", "model.onnx"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("os", func(b *testing.B) {
		b.SetBytes(64 << 20)
		for b.Loop() {
			if _, err := os.ReadFile(filepath.Join(tmp, "model.onnx")); err != nil {
				b.Fatal(err)
			}
		}
	})
}
