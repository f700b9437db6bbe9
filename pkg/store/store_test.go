package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t, filepath.Join(t.TempDir(), "models.db"))
	w1 := randBytes(1, 3<<20)
	w2 := bytes.Clone(w1)
	copy(w2[1<<20:], randBytes(2, 100<<10)) // one region changed
	tok := []byte(`{"model":{"type":"BPE"}}`)

	r1 := importFiles(t, s, "m", "1", map[string][]byte{"model.onnx": w1, "tokenizer.json": tok})
	if r1.String() != "m@1" {
		t.Fatalf("import returned %s", r1)
	}
	st1, _ := s.Stats(ctx)
	importFiles(t, s, "m", "2", map[string][]byte{"model.onnx": w2, "tokenizer.json": tok})
	st2, _ := s.Stats(ctx)
	if added := st2.ChunkBytes - st1.ChunkBytes; added > int64(len(w1))/2 {
		t.Errorf("second version added %d chunk bytes for a 100 KiB change", added)
	}

	// The first version imported becomes active; the second does not.
	check := func(ref string, want []byte) {
		t.Helper()
		got, err := s.ReadFile(ctx, ref, "model.onnx")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: content differs", ref)
		}
	}
	check("m", w1)
	check("m@2", w2)
	if err := s.Activate(ctx, "m@2"); err != nil {
		t.Fatal(err)
	}
	check("m", w2)
	if r, err := s.Rollback(ctx, "m"); err != nil || r.String() != "m@1" {
		t.Fatalf("rollback = %v, %v", r, err)
	}
	check("m", w1)
	if r, err := s.Rollback(ctx, "m"); err != nil || r.String() != "m@2" {
		t.Fatalf("second rollback = %v, %v", r, err)
	}

	var rows []string
	for e, err := range s.List(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, e.Ref.String())
		if e.Ref.Version == "2" && !e.Active || e.Ref.Version == "1" && !e.Previous {
			t.Errorf("roles wrong: %+v", e)
		}
	}
	if len(rows) != 2 {
		t.Fatalf("list = %v", rows)
	}

	out := t.TempDir()
	if _, err := s.Export(ctx, "m@1", out); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "model.onnx")); !bytes.Equal(got, w1) {
		t.Fatal("export differs")
	}
	if _, err := os.Stat(filepath.Join(out, ManifestFile)); err != nil {
		t.Fatal("manifest not exported:", err)
	}

	if err := s.Remove(ctx, "m@2"); !errors.Is(err, ErrActive) {
		t.Fatalf("remove active: %v", err)
	}
	if err := s.Remove(ctx, "m@1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rollback(ctx, "m"); !errors.Is(err, ErrNoPrevious) {
		t.Fatalf("rollback after removing previous: %v", err)
	}
	gc, err := s.GC(ctx)
	if err != nil || gc.Chunks == 0 {
		t.Fatalf("gc = %+v, %v", gc, err)
	}
	if _, err := s.Verify(ctx, nil); err != nil {
		t.Fatal(err)
	}
	check("m", w2)
	if _, err := s.ReadFile(ctx, "m@1", "model.onnx"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read removed: %v", err)
	}
	// The only version may go, and its name with it.
	if err := s.Remove(ctx, "m@2"); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(ctx); st.Models != 0 || st.Versions != 0 {
		t.Fatalf("after removing all: %+v", st)
	}
}

func TestImportIdempotentAndConflict(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t, filepath.Join(t.TempDir(), "models.db"))
	dir := t.TempDir()
	writeBundle(t, dir, "m", "1", map[string][]byte{"model.onnx": randBytes(3, 1000)})
	for range 2 {
		if _, err := s.Import(ctx, dir, nil); err != nil {
			t.Fatal(err)
		}
	}
	writeBundle(t, dir, "m", "1", map[string][]byte{"model.onnx": randBytes(4, 1000)})
	if _, err := s.Import(ctx, dir, nil); !errors.Is(err, ErrExists) {
		t.Fatalf("conflicting import: %v", err)
	}
}

func TestImportRejects(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"no manifest", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "model.onnx"), []byte("x"), 0o644)
		}},
		{"manifest without version", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"name":"m"}`), 0o644)
		}},
		{"manifest not json", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{`), 0o644)
		}},
		{"name with @", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"name":"a@b","version":"1"}`), 0o644)
		}},
		{"symlink escaping", func(t *testing.T, dir string) {
			outside := filepath.Join(t.TempDir(), "secret")
			os.WriteFile(outside, []byte("secret"), 0o644)
			if err := os.Symlink(outside, filepath.Join(dir, "model.onnx")); err != nil {
				t.Skip(err)
			}
			sealBundle(t, dir, "m", "1") // the manifest even vouches for it
		}},
	}
	s := openTestStore(t, filepath.Join(t.TempDir(), "models.db"))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			_, err := s.Import(context.Background(), dir, nil)
			if !errors.Is(err, ErrBadBundle) {
				t.Fatalf("got %v, want ErrBadBundle", err)
			}
		})
	}
	if st, _ := s.Stats(context.Background()); st.Versions != 0 {
		t.Fatalf("a rejected bundle left %d versions", st.Versions)
	}
}

func TestSymlinkInsideBundle(t *testing.T) {
	s := openTestStore(t, filepath.Join(t.TempDir(), "models.db"))
	dir := t.TempDir()
	writeBundle(t, dir, "m", "1", map[string][]byte{"weights/a.bin": []byte("abc")})
	if err := os.Symlink("weights/a.bin", filepath.Join(dir, "model.onnx.data")); err != nil {
		t.Skip(err)
	}
	sealBundle(t, dir, "m", "1")
	importFilesDir(t, s, dir)
	got, err := s.ReadFile(context.Background(), "m@1", "model.onnx.data")
	if err != nil || string(got) != "abc" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func importFilesDir(t *testing.T, s *Store, dir string) {
	t.Helper()
	if _, err := s.Import(context.Background(), dir, nil); err != nil {
		t.Fatal(err)
	}
}

func TestOwnerBuckets(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t, filepath.Join(t.TempDir(), "models.db"))
	if err := s.Update(ctx, "store.chunks", func(*Tx) error { return nil }); !errors.Is(err, ErrReservedBucket) {
		t.Fatalf("reserved bucket: %v", err)
	}
	if err := s.View(ctx, "outbox", func(tx *Tx) error {
		if tx.Get([]byte("x")) != nil {
			t.Error("empty bucket has a value")
		}
		if err := tx.Put([]byte("x"), nil); err == nil {
			t.Error("put in a view succeeded")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.Update(ctx, "outbox", func(tx *Tx) error {
			_, err := tx.Append([]byte{byte('a' + i)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A failing update rolls back.
	boom := errors.New("boom")
	if err := s.Update(ctx, "outbox", func(tx *Tx) error {
		tx.Append([]byte("z"))
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	var got []byte
	s.View(ctx, "outbox", func(tx *Tx) error {
		return tx.ForEach(SeqKey(2), func(k, v []byte) (bool, error) {
			got = append(got, v...)
			return true, nil
		})
	})
	if string(got) != "bc" {
		t.Fatalf("journal from seq 2 = %q", got)
	}
}
