package store

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestStagePublish moves a version into a second store chunk by chunk, as
// an update does: only the missing chunks, each checked, the version
// invisible until Publish and not active after it.
func TestStagePublish(t *testing.T) {
	ctx := context.Background()
	src := openTestStore(t, t.TempDir()+"/src.db")
	dst := openTestStore(t, t.TempDir()+"/dst.db")
	shared := randBytes(1, 3<<20)
	importFiles(t, dst, "m", "1", map[string][]byte{"w.bin": shared})
	changed := append(bytes.Clone(shared), randBytes(2, 2<<20)...)
	ref := importFiles(t, src, "m", "2", map[string][]byte{"w.bin": changed})
	v, err := src.Resolve(ctx, ref.String())
	if err != nil {
		t.Fatal(err)
	}

	f, _ := v.File("w.bin")
	split, err := Split(bytes.NewReader(changed), nil)
	if err != nil || split.SHA256 != f.SHA256 || len(split.Chunks) != len(f.Chunks) {
		t.Fatalf("Split differs from Import: %v, %d vs %d chunks", err, len(split.Chunks), len(f.Chunks))
	}

	st := dst.Stage()
	defer st.Close()
	missing, err := st.Missing(ctx, v.Files)
	if err != nil {
		t.Fatal(err)
	}
	var all, need int64
	for _, f := range v.Files {
		all += f.Size
	}
	for _, c := range missing {
		need += c.Size
	}
	if need == 0 || need >= all {
		t.Fatalf("missing %d of %d bytes: want only the changed tail and the new manifest", need, all)
	}
	if _, err := st.Publish(ctx, v.Files); !errors.Is(err, ErrNotFound) {
		t.Fatalf("publish with chunks missing: %v, want ErrNotFound", err)
	}
	for i, c := range missing {
		data := chunkBytes(t, src, c.SHA256)
		if i == 0 {
			bad := bytes.Clone(data)
			bad[0] ^= 1
			if err := st.PutChunk(ctx, c.SHA256, bad); !errors.Is(err, ErrIntegrity) {
				t.Fatalf("tampered chunk: %v, want ErrIntegrity", err)
			}
		}
		if err := st.PutChunk(ctx, c.SHA256, data); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dst.Resolve(ctx, "m@2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("version visible before publish: %v", err)
	}
	got, err := st.Publish(ctx, v.Files)
	if err != nil || got != ref {
		t.Fatalf("publish = %v, %v", got, err)
	}
	b, err := dst.ReadFile(ctx, "m@2", "w.bin")
	if err != nil || !bytes.Equal(b, changed) {
		t.Fatalf("read back: %v (equal %v)", err, bytes.Equal(b, changed))
	}
	if cur, _ := dst.Resolve(ctx, "m"); cur.Version != "1" {
		t.Fatalf("publish activated %s", cur.Version)
	}
}

func chunkBytes(t *testing.T, s *Store, d Digest) []byte {
	t.Helper()
	b, err := s.ReadChunk(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
