package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ManifestFile is the bundle's manifest; the store reads only its "name"
// and "version" and keeps the rest verbatim.
const ManifestFile = "edgeinfer.json"

// maxManifest bounds the manifest read into memory.
const maxManifest = 16 << 20

// Progress reports work done and total in bytes; it is called from the
// goroutine running the operation. A nil Progress is allowed.
type Progress func(done, total int64)

// Import stores the bundle in directory dir as the version named by its
// edgeinfer.json and returns its reference. Files are streamed in chunks
// (memory is bounded by Options.TxBytes plus one 4 MiB chunk buffer,
// whatever the bundle size); chunks are committed in many small
// transactions and the version becomes visible only in the final one, so
// a crash or error leaves no partial version (the orphan chunks are
// content-addressed and removed by GC). The first version of a name becomes
// its active version. Importing an identical version again is a no-op;
// different content under an existing name@version is ErrExists.
func (s *Store) Import(ctx context.Context, dir string, progress Progress) (Ref, error) {
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()

	root, err := os.OpenRoot(dir)
	if err != nil {
		return Ref{}, fmt.Errorf("%w: %v", ErrBadBundle, err)
	}
	defer root.Close()
	manifest, err := readManifest(root)
	if err != nil {
		return Ref{}, err
	}
	ref, err := parseManifestHead(manifest)
	if err != nil {
		return Ref{}, err
	}
	files, total, err := listBundle(root)
	if err != nil {
		return Ref{}, err
	}
	v := &Version{Name: ref.Name, Version: ref.Version, Manifest: manifest, Size: total}

	w := &chunkWriter{s: s}
	defer w.rollback()
	var done int64
	for _, f := range files {
		rec, err := w.importFile(ctx, root, f, func(n int64) {
			done += n
			if progress != nil {
				progress(done, total)
			}
		})
		if err != nil {
			return Ref{}, fmt.Errorf("store: import %s: %s: %w", ref, f, err)
		}
		v.Files = append(v.Files, rec)
	}
	if err := w.commit(); err != nil {
		return Ref{}, fmt.Errorf("store: import %s: %w", ref, err)
	}
	v.Imported = time.Now().UTC()
	if err := v.validate(); err != nil {
		return Ref{}, fmt.Errorf("%w: %s: %v", ErrBadBundle, ref, err)
	}
	if err := s.publish(ctx, v, true); err != nil {
		return Ref{}, fmt.Errorf("store: import %s: %w", ref, err)
	}
	s.log.Debug("store: imported", "ref", ref.String(), "bytes", total, "new_chunk_bytes", w.written)
	return ref, nil
}

func readManifest(root *os.Root) ([]byte, error) {
	f, err := root.Open(ManifestFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadBundle, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadBundle, ManifestFile, err)
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrBadBundle, ManifestFile, maxManifest)
	}
	return bytes.TrimSpace(b), nil
}

// listBundle returns the bundle's regular files (sorted, slash-separated)
// and their total size. Symlinks are followed only inside the bundle:
// os.Root refuses any that escape it.
func listBundle(root *os.Root) ([]string, int64, error) {
	var files []string
	var total int64
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		fi, err := root.Stat(p) // follows symlinks, within the root only
		if err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file (%s)", p, fi.Mode().Type())
		}
		files = append(files, p)
		total += fi.Size()
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrBadBundle, err)
	}
	slices.Sort(files)
	return files, total, nil
}

// chunkWriter writes new chunks in write transactions of bounded size. It
// is not safe for concurrent use.
type chunkWriter struct {
	s       *Store
	tx      *bolt.Tx
	pending int64 // chunk bytes in tx
	written int64 // chunk bytes committed by this writer
}

func (w *chunkWriter) importFile(ctx context.Context, root *os.Root, p string, advance func(int64)) (File, error) {
	fh, err := root.Open(p)
	if err != nil {
		return File{}, err
	}
	defer fh.Close()
	rec := File{Path: p}
	whole := sha256.New()
	c := newChunker(fh)
	for {
		if err := ctx.Err(); err != nil {
			return File{}, err
		}
		data, err := c.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return File{}, err
		}
		whole.Write(data)
		d := Digest(sha256.Sum256(data))
		if err := w.put(d, data); err != nil {
			return File{}, err
		}
		rec.Chunks = append(rec.Chunks, Chunk{SHA256: d, Size: int64(len(data))})
		rec.Size += int64(len(data))
		advance(int64(len(data)))
	}
	copy(rec.SHA256[:], whole.Sum(nil))
	return rec, nil
}

// put stores data under d unless present. bbolt keeps a reference to the
// value until commit, so new data is copied (the chunker reuses its buffer).
func (w *chunkWriter) put(d Digest, data []byte) error {
	if w.tx == nil {
		tx, err := w.s.db.Begin(true)
		if err != nil {
			return w.s.mapErr(err)
		}
		w.tx = tx
	}
	chunks := w.tx.Bucket([]byte(bucketChunks))
	if chunks.Bucket(d[:]) != nil {
		return nil
	}
	b, err := chunks.CreateBucket(d[:])
	if err != nil {
		return err
	}
	b.FillPercent = 1 // one value, never split
	if err := b.Put(chunkDataKey, bytes.Clone(data)); err != nil {
		return err
	}
	w.pending += int64(len(data))
	if w.pending >= w.s.opts.TxBytes {
		return w.commit()
	}
	return nil
}

func (w *chunkWriter) commit() error {
	if w.tx == nil {
		return nil
	}
	tx := w.tx
	w.tx = nil
	if err := tx.Commit(); err != nil {
		return w.s.mapErr(err)
	}
	w.written += w.pending
	w.pending = 0
	return nil
}

func (w *chunkWriter) rollback() {
	if w.tx != nil {
		_ = w.tx.Rollback() // nothing to report: the chunks are simply not written
		w.tx = nil
	}
}

// publish makes v visible in one transaction, after checking that every
// chunk it names is present (GC cannot run during an import, so they are).
// With firstActive the first version of a name becomes its active one.
func (s *Store) publish(ctx context.Context, v *Version, firstActive bool) error {
	rec, err := encodeRecord(v)
	if err != nil {
		return err
	}
	return s.update(ctx, func(tx *bolt.Tx) error {
		versions := tx.Bucket([]byte(bucketVersions))
		key := versionKey(v.Ref())
		if old := versions.Get(key); old != nil {
			prev, err := decodeVersion(old)
			if err == nil && sameFiles(prev, v) {
				return nil
			}
			return fmt.Errorf("%w: %s", ErrExists, v.Ref())
		}
		chunks := tx.Bucket([]byte(bucketChunks))
		for _, f := range v.Files {
			for _, c := range f.Chunks {
				if chunks.Bucket(c.SHA256[:]) == nil {
					return fmt.Errorf("%w: chunk %s of %s vanished before publish", ErrIntegrity, c.SHA256, f.Path)
				}
			}
		}
		if err := versions.Put(key, rec); err != nil {
			return err
		}
		p, err := getPointers(tx, v.Name)
		if err != nil {
			return err
		}
		if p.Active == "" && firstActive {
			p.Active = v.Version
			return putPointers(tx, v.Name, p)
		}
		return nil
	})
}

func sameFiles(a, b *Version) bool {
	if len(a.Files) != len(b.Files) {
		return false
	}
	for i := range a.Files {
		if a.Files[i].Path != b.Files[i].Path || a.Files[i].SHA256 != b.Files[i].SHA256 {
			return false
		}
	}
	return true
}
