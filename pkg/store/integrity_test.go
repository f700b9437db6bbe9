package store

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// storeState is what a refused import must leave unchanged: every version
// with its pointers, the chunk set, and Verify's verdict.
type storeState struct {
	Entries    []Entry
	Chunks     int
	ChunkBytes int64
	Verified   VerifyReport
}

func snapshot(t *testing.T, s *Store) storeState {
	t.Helper()
	ctx := context.Background()
	var st storeState
	for e, err := range s.List(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		st.Entries = append(st.Entries, e)
	}
	stats, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Chunks, st.ChunkBytes = stats.Chunks, stats.ChunkBytes
	if st.Verified, err = s.Verify(ctx, nil); err != nil {
		t.Fatalf("verify: %v", err)
	}
	return st
}

func TestImportRefusesBundleThatContradictsManifest(t *testing.T) {
	ctx := context.Background()
	// Small transactions, so that a multi-chunk file has committed chunks
	// by the time its digest turns out wrong.
	s, err := Open(ctx, filepath.Join(t.TempDir(), "models.db"), Options{TxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := randBytes(7, 6<<20)
	graph := randBytes(8, 5000)
	importFiles(t, s, "tiny", "1", map[string][]byte{"model.onnx": graph, "model.onnx.data": data})
	before := snapshot(t, s)

	// Each case starts from version 2: the same graph, new weights, sealed.
	data2 := append(randBytes(9, 3<<20), data[3<<20:]...)
	tests := []struct {
		name   string
		tamper func(t *testing.T, dir string)
		is     error
		want   []string // in the message
	}{
		{"flipped byte", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.onnx.data")
			b, _ := os.ReadFile(p)
			b[len(b)-4096] ^= 1 // late: most chunks are stored before the digest is known
			os.WriteFile(p, b, 0o644)
		}, ErrMismatch, []string{"tiny@2", "model.onnx.data", "has sha256", "edgeinfer.json says"}},
		{"missing file", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model.onnx.data"))
		}, ErrMismatch, []string{"model.onnx.data", "listed in edgeinfer.json but missing"}},
		{"truncated file", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, "model.onnx.data"), 1000)
		}, ErrMismatch, []string{"model.onnx.data", "is 1000 bytes, edgeinfer.json says 6291456"}},
		{"extra-long file", func(t *testing.T, dir string) {
			f, _ := os.OpenFile(filepath.Join(dir, "model.onnx"), os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte("more"))
			f.Close()
		}, ErrMismatch, []string{"model.onnx", "is 5004 bytes, edgeinfer.json says 5000"}},
		{"unlisted file", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "extra.bin"), []byte("x"), 0o644)
		}, ErrMismatch, []string{"extra.bin", "not listed in edgeinfer.json"}},
		{"path outside the bundle", func(t *testing.T, dir string) {
			rewriteManifest(t, dir, `"path":"model.onnx"`, `"path":"../model.onnx"`)
		}, ErrBadBundle, []string{`"../model.onnx"`, "inside the bundle directory"}},
		{"absolute path", func(t *testing.T, dir string) {
			rewriteManifest(t, dir, `"path":"model.onnx"`, `"path":"/etc/passwd"`)
		}, ErrBadBundle, []string{`"/etc/passwd"`}},
		{"no file list", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"name":"tiny","version":"2"}`), 0o644)
		}, ErrBadBundle, []string{`no "files" list`}},
		{"bad digest", func(t *testing.T, dir string) {
			rewriteManifest(t, dir, `"sha256":"`, `"sha256":"zz`)
		}, ErrBadBundle, []string{"edgeinfer.json"}},
		{"manifest lists itself", func(t *testing.T, dir string) {
			rewriteManifest(t, dir, `"path":"model.onnx"`, `"path":"edgeinfer.json"`)
		}, ErrBadBundle, []string{"lists itself"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeBundle(t, dir, "tiny", "2", map[string][]byte{"model.onnx": graph, "model.onnx.data": data2})
			tc.tamper(t, dir)
			_, err := s.Import(ctx, dir, nil)
			if !errors.Is(err, tc.is) || !errors.Is(err, ErrBadBundle) {
				t.Fatalf("import: %v; want %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if after := snapshot(t, s); !reflect.DeepEqual(after, before) {
				t.Fatalf("refused import changed the store:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}

	// The same bundle untampered imports, without becoming active.
	dir := t.TempDir()
	writeBundle(t, dir, "tiny", "2", map[string][]byte{"model.onnx": graph, "model.onnx.data": data2})
	if _, err := s.Import(ctx, dir, nil); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Resolve(ctx, "tiny"); err != nil || v.Version != "1" {
		t.Fatalf("active after importing v2: %v %v", v, err)
	}
}

// A refused first version of a name leaves no name behind either.
func TestImportRefusedNewModelLeavesNothing(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t, filepath.Join(t.TempDir(), "models.db"))
	before := snapshot(t, s)
	dir := t.TempDir()
	writeBundle(t, dir, "fresh", "1", map[string][]byte{"model.onnx": randBytes(1, 2<<20)})
	b, _ := os.ReadFile(filepath.Join(dir, "model.onnx"))
	b[10] ^= 0x80
	os.WriteFile(filepath.Join(dir, "model.onnx"), b, 0o644)
	if _, err := s.Import(ctx, dir, nil); !errors.Is(err, ErrMismatch) {
		t.Fatalf("import: %v", err)
	}
	if after := snapshot(t, s); !reflect.DeepEqual(after, before) {
		t.Fatalf("store changed: %+v -> %+v", before, after)
	}
	if _, err := s.Resolve(ctx, "fresh"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resolve refused model: %v", err)
	}
}

func rewriteManifest(t *testing.T, dir, old, new string) {
	t.Helper()
	p := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("manifest %s lacks %q", b, old)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenMustExist(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "nested")
	path := filepath.Join(dir, "models.db")
	_, err := Open(ctx, path, Options{MustExist: true})
	if !errors.Is(err, ErrNoStore) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("open of a missing store: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("MustExist created %s: %v", dir, err)
	}
	s := openTestStore(t, path) // the default creates it
	importFiles(t, s, "m", "1", map[string][]byte{"model.onnx": []byte("x")})
	s.Close()
	s, err = Open(ctx, path, Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Resolve(ctx, "m"); err != nil {
		t.Fatal(err)
	}
}

// A version that contradicts its own manifest (stored by a build before
// Import checked) is damage Verify names.
func TestVerifyFindsVersionContradictingManifest(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t, filepath.Join(t.TempDir(), "models.db"))
	ref := importFiles(t, s, "old", "1", map[string][]byte{"model.onnx": []byte("graph"), "model.onnx.data": []byte("weights")})
	if _, err := s.Verify(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// Rewrite the record as an older build would have stored a tampered
	// bundle: the manifest's digest of model.onnx.data is not what is stored.
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucketVersions))
		v, err := decodeVersion(b.Get(versionKey(ref)))
		if err != nil {
			return err
		}
		f, _ := v.File("model.onnx.data")
		v.Manifest = []byte(strings.Replace(string(v.Manifest), f.SHA256.String(), strings.Repeat("0", 64), 1))
		rec, err := encodeRecord(v)
		if err != nil {
			return err
		}
		return b.Put(versionKey(ref), rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Verify(ctx, nil)
	if !errors.Is(err, ErrIntegrity) || len(rep.Damaged) != 1 {
		t.Fatalf("verify: %v %+v", err, rep.Damaged)
	}
	if d := rep.Damaged[0].String(); !strings.Contains(d, "model old@1 file model.onnx.data: stored sha256") || !strings.Contains(d, "edgeinfer.json says 0000") {
		t.Fatalf("damage %q", d)
	}
}

// An update that arrives chunk by chunk is held to its manifest as an
// import is: files whose chunks add up but contradict edgeinfer.json are
// refused, and nothing is published.
func TestStagedPublishRefusesFilesThatContradictManifest(t *testing.T) {
	ctx := context.Background()
	src := openTestStore(t, filepath.Join(t.TempDir(), "src.db"))
	dst := openTestStore(t, filepath.Join(t.TempDir(), "dst.db"))
	ref := importFiles(t, src, "m", "1", map[string][]byte{"w.bin": randBytes(5, 1<<20)})
	v, err := src.Resolve(ctx, ref.String())
	if err != nil {
		t.Fatal(err)
	}
	// The sender swaps w.bin for other bytes, consistently chunked and
	// hashed, and keeps the manifest.
	st := dst.Stage()
	defer st.Close()
	other, err := Split(bytes.NewReader(randBytes(6, 1<<20)), func(c Chunk, data []byte) error {
		return st.PutChunk(ctx, c.SHA256, bytes.Clone(data))
	})
	if err != nil {
		t.Fatal(err)
	}
	files := slices.Clone(v.Files)
	for i := range files {
		switch files[i].Path {
		case "w.bin":
			other.Path = "w.bin"
			files[i] = other
		case ManifestFile:
			for _, c := range files[i].Chunks {
				if err := st.PutChunk(ctx, c.SHA256, chunkBytes(t, src, c.SHA256)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	_, err = st.Publish(ctx, files)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "w.bin has sha256") {
		t.Fatalf("publish of files contradicting the manifest: %v", err)
	}
	if _, err := dst.Resolve(ctx, "m@1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused version is visible: %v", err)
	}
	// The honest file list publishes.
	for _, c := range v.Files[slices.IndexFunc(v.Files, func(f File) bool { return f.Path == "w.bin" })].Chunks {
		if err := st.PutChunk(ctx, c.SHA256, chunkBytes(t, src, c.SHA256)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Publish(ctx, v.Files); err != nil {
		t.Fatal(err)
	}
}
