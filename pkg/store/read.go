package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// ReadFile returns the bytes of one file of a model version ("name" for
// the active version or "name@version"; path relative to the bundle, e.g.
// "model.onnx"). The file is assembled into one buffer with a single copy
// out of bbolt's memory map and re-hashed against its recorded SHA-256
// before it is returned: a mismatch is ErrIntegrity naming the model and
// the file, and other files and models are unaffected.
func (s *Store) ReadFile(ctx context.Context, ref, path string) ([]byte, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	var out []byte
	err = s.view(ctx, func(tx *bolt.Tx) error {
		v, err := resolveTx(tx, r)
		if err != nil {
			return err
		}
		f, ok := v.File(path)
		if !ok {
			return fmt.Errorf("%w: %s has no file %q", ErrNotFound, v.Ref(), path)
		}
		out, err = assemble(ctx, tx, v, f)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: read %s %s: %w", ref, path, err)
	}
	return out, nil
}

// assemble copies f's chunks into one buffer and re-hashes each chunk
// there against its digest, on all CPUs. Checking every chunk against its
// SHA-256 proves the whole file: the chunk list was computed from the same
// bytes as the file digest at import and is itself covered by the version
// record's checksum, which decodeVersion checked. Unlike one sequential
// file hash this runs in parallel, which is what brings a store load close
// to a plain os.ReadFile (doc.go has the figures).
func assemble(ctx context.Context, tx *bolt.Tx, v *Version, f *File) ([]byte, error) {
	// bbolt transactions are not safe for concurrent use: look the chunks
	// up here, then let the workers touch only the mapped bytes.
	parts := make([][]byte, 0, len(f.Chunks))
	if err := eachChunk(ctx, tx, v, f, func(data []byte) error {
		parts = append(parts, data)
		return nil
	}); err != nil {
		return nil, err
	}
	buf := make([]byte, f.Size)
	offs := make([]int64, len(parts))
	var off int64
	for i, p := range parts {
		offs[i] = off
		off += int64(len(p))
	}
	bad, err := hashN(ctx, len(parts), func(i int) (Digest, []byte) {
		dst := buf[offs[i] : offs[i]+int64(len(parts[i]))]
		copy(dst, parts[i])
		return f.Chunks[i].SHA256, dst
	}, f.Size, nil)
	if err != nil {
		return nil, err
	}
	for _, c := range f.Chunks {
		if why, ok := bad[c.SHA256]; ok {
			return nil, integrityError(v, f, "chunk "+c.SHA256.String()+": "+why)
		}
	}
	return buf, nil
}

// eachChunk calls fn with each chunk of f in order; data points into the
// memory map and is valid only during the call.
func eachChunk(ctx context.Context, tx *bolt.Tx, v *Version, f *File, fn func(data []byte) error) error {
	chunks := tx.Bucket([]byte(bucketChunks))
	for _, c := range f.Chunks {
		if err := ctx.Err(); err != nil {
			return err
		}
		data := chunkData(chunks, c.SHA256)
		if data == nil {
			return integrityError(v, f, "chunk "+c.SHA256.String()+" is missing")
		}
		if int64(len(data)) != c.Size {
			return integrityError(v, f, fmt.Sprintf("chunk %s has %d bytes, want %d", c.SHA256, len(data), c.Size))
		}
		if err := fn(data); err != nil {
			return err
		}
	}
	return nil
}

func chunkData(chunks *bolt.Bucket, d Digest) []byte {
	b := chunks.Bucket(d[:])
	if b == nil {
		return nil
	}
	return b.Get(chunkDataKey)
}

func integrityError(v *Version, f *File, why string) error {
	return fmt.Errorf("%w: model %s file %s: %s", ErrIntegrity, v.Ref(), f.Path, why)
}

// Export writes every file of a model version into dir (created if
// needed), so that a runtime that wants paths (ONNX Runtime with external
// weights next to model.onnx) can load it. Each file is written to a
// temporary name, checked against its digest, synced and renamed, so dir
// never holds a partial or corrupt file under a bundle name. It returns the
// resolved reference.
func (s *Store) Export(ctx context.Context, ref, dir string) (Ref, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return Ref{}, err
	}
	var out Ref
	err = s.view(ctx, func(tx *bolt.Tx) error {
		v, err := resolveTx(tx, r)
		if err != nil {
			return err
		}
		out = v.Ref()
		for i := range v.Files {
			if err := exportFile(ctx, tx, v, &v.Files[i], dir); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Ref{}, fmt.Errorf("store: export %s: %w", ref, wrapIOErr(err))
	}
	return out, nil
}

func exportFile(ctx context.Context, tx *bolt.Tx, v *Version, f *File, dir string) (err error) {
	dst := filepath.Join(dir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".export-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, tmp.Close(), os.Remove(tmp.Name()))
		}
	}()
	h := sha256.New()
	err = eachChunk(ctx, tx, v, f, func(data []byte) error {
		h.Write(data)
		_, err := tmp.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	if Digest(h.Sum(nil)) != f.SHA256 {
		return integrityError(v, f, "content does not match its sha256")
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
