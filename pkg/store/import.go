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
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ManifestFile is the bundle's manifest. The store reads its "name",
// "version" and "files" (each file's path, size and sha256) and keeps the
// rest verbatim.
const ManifestFile = "edgeinfer.json"

// maxManifest bounds the manifest read into memory.
const maxManifest = 16 << 20

// Progress reports work done and total in bytes; it is called from the
// goroutine running the operation. A nil Progress is allowed.
type Progress func(done, total int64)

// Import stores the bundle in directory dir as the version named by its
// edgeinfer.json and returns its reference.
//
// The manifest vouches for the bundle: every file in dir but the manifest
// must be listed in its "files", every listed file must be there, and each
// file's size and sha256 must match what the manifest says. Sizes are
// checked before any byte is stored; digests while the file streams. A
// bundle that contradicts its manifest is refused with ErrMismatch naming
// the file and what was expected and found; nothing is activated, and the
// chunks the import had written are deleted again, so the store is left as
// it was (a store that an update agent feeds must never hold a version
// that does not match its own manifest).
//
// Files are streamed in chunks (memory is bounded by Options.TxBytes plus
// one 4 MiB chunk buffer, whatever the bundle size); chunks are committed in
// many small transactions and the version becomes visible only in the final
// one, so a crash leaves no partial version (the orphan chunks of a killed
// import are content-addressed and removed by GC). The first version of a
// name becomes its active version. Importing an identical version again is
// a no-op; different content under an existing name@version is ErrExists.
func (s *Store) Import(ctx context.Context, dir string, progress Progress) (Ref, error) {
	ref, created, err := s.importBundle(ctx, dir, progress)
	if err != nil && len(created) > 0 {
		// Cleaning up must not be skipped because the caller gave up.
		if cerr := s.dropUnreferenced(context.WithoutCancel(ctx), created); cerr != nil {
			err = errors.Join(err, fmt.Errorf("store: import: removing the refused bundle's chunks: %w (run GC)", cerr))
		}
	}
	return ref, err
}

// importBundle does the import under the shared GC lock and returns the
// digests of the chunks it wrote, for Import to remove on failure.
func (s *Store) importBundle(ctx context.Context, dir string, progress Progress) (Ref, []Digest, error) {
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()

	fi, err := os.Stat(dir)
	if err != nil {
		return Ref{}, nil, fmt.Errorf("%w: %w", ErrBadBundle, err)
	}
	if !fi.IsDir() {
		return Ref{}, nil, fmt.Errorf("%w: %s is not a directory", ErrBadBundle, dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Ref{}, nil, fmt.Errorf("%w: %w", ErrBadBundle, err)
	}
	defer root.Close()
	raw, err := readManifest(root)
	if err != nil {
		return Ref{}, nil, err
	}
	m, err := parseManifest(raw)
	if err != nil {
		return Ref{}, nil, err
	}
	ref := m.ref()
	files, total, err := listBundle(root)
	if err != nil {
		return Ref{}, nil, err
	}
	want, err := matchFiles(ref, m, raw, files)
	if err != nil {
		return Ref{}, nil, err
	}
	v := &Version{Name: ref.Name, Version: ref.Version, Manifest: bytes.TrimSpace(raw), Size: total}

	w := &chunkWriter{s: s}
	defer w.rollback()
	var done int64
	for _, f := range files {
		rec, err := w.importFile(ctx, root, f.path, want[f.path].size, func(n int64) {
			done += n
			if progress != nil {
				progress(done, total)
			}
		})
		if err == nil {
			err = want[f.path].check(ref, rec)
		}
		if err != nil {
			if !errors.Is(err, ErrMismatch) {
				err = fmt.Errorf("store: import %s: %s: %w", ref, f.path, err)
			}
			return Ref{}, w.created, err
		}
		v.Files = append(v.Files, rec)
	}
	if err := w.commit(); err != nil {
		return Ref{}, w.created, fmt.Errorf("store: import %s: %w", ref, err)
	}
	v.Imported = time.Now().UTC()
	if err := v.validate(); err != nil {
		return Ref{}, w.created, fmt.Errorf("%w: %s: %v", ErrBadBundle, ref, err)
	}
	if err := s.publish(ctx, v, true); err != nil {
		return Ref{}, w.created, fmt.Errorf("store: import %s: %w", ref, err)
	}
	s.log.Debug("store: imported", "ref", ref.String(), "bytes", total, "new_chunk_bytes", w.written)
	return ref, nil, nil
}

// readManifest returns edgeinfer.json as it is on disk (the store checks
// the streamed copy of the file against these very bytes).
func readManifest(root *os.Root) ([]byte, error) {
	f, err := root.Open(ManifestFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadBundle, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadBundle, ManifestFile, err)
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrBadBundle, ManifestFile, maxManifest)
	}
	return b, nil
}

// bundleFile is one regular file found in a bundle directory.
type bundleFile struct {
	path string // slash-separated, relative
	size int64
}

// listBundle returns the bundle's regular files (sorted by path) and their
// total size. Symlinks are followed only inside the bundle: os.Root refuses
// any that escape it.
func listBundle(root *os.Root) ([]bundleFile, int64, error) {
	var files []bundleFile
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
		files = append(files, bundleFile{path: p, size: fi.Size()})
		total += fi.Size()
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrBadBundle, err)
	}
	slices.SortFunc(files, func(a, b bundleFile) int { return strings.Compare(a.path, b.path) })
	return files, total, nil
}

// matchFiles pairs the files found with the manifest's list before anything
// is stored: an unlisted file, a listed one that is absent, or one whose
// size already differs is refused here. The manifest itself is expected to
// stream as the bytes that were parsed.
func matchFiles(ref Ref, m *manifest, raw []byte, found []bundleFile) (map[string]expect, error) {
	want := make(map[string]expect, len(m.Files)+1)
	for _, f := range m.Files {
		want[f.Path] = expect{path: f.Path, size: f.Size, sha256: f.SHA256}
	}
	want[ManifestFile] = expect{path: ManifestFile, size: int64(len(raw)), sha256: Digest(sha256.Sum256(raw))}
	seen := make(map[string]bool, len(found))
	for _, f := range found {
		seen[f.path] = true
		e, ok := want[f.path]
		if !ok {
			return nil, &mismatchError{ref: ref, path: f.path, detail: "is in the bundle directory but not listed in " + ManifestFile}
		}
		if f.size != e.size {
			return nil, e.sizeError(ref, f.size)
		}
	}
	for _, f := range m.Files {
		if !seen[f.Path] {
			return nil, &mismatchError{ref: ref, path: f.Path, detail: "is listed in " + ManifestFile + " but missing from the bundle directory"}
		}
	}
	return want, nil
}

// matchManifest checks a staged version's files (already re-hashed from
// their chunks) against its manifest: the same set, sizes and digests.
func matchManifest(ref Ref, m *manifest, files []File) error {
	stored := make(map[string]File, len(files))
	for _, f := range files {
		stored[f.Path] = f
		if f.Path == ManifestFile {
			continue
		}
		if !slices.ContainsFunc(m.Files, func(e manifestEntry) bool { return e.Path == f.Path }) {
			return &mismatchError{ref: ref, path: f.Path, detail: "is staged but not listed in " + ManifestFile}
		}
	}
	for _, e := range m.Files {
		f, ok := stored[e.Path]
		if !ok {
			return &mismatchError{ref: ref, path: e.Path, detail: "is listed in " + ManifestFile + " but not staged"}
		}
		if err := (expect{path: e.Path, size: e.Size, sha256: e.SHA256}).check(ref, f); err != nil {
			return err
		}
	}
	return nil
}

// expect is what the manifest says one file is.
type expect struct {
	path   string
	size   int64
	sha256 Digest
}

// check compares a streamed file with the manifest's size and digest.
func (e expect) check(ref Ref, got File) error {
	if got.Size != e.size {
		return e.sizeError(ref, got.Size)
	}
	if got.SHA256 != e.sha256 {
		return &mismatchError{ref: ref, path: e.path,
			detail: fmt.Sprintf("has sha256 %s, %s says %s", got.SHA256, ManifestFile, e.sha256)}
	}
	return nil
}

func (e expect) sizeError(ref Ref, got int64) error {
	return &mismatchError{ref: ref, path: e.path,
		detail: fmt.Sprintf("is %d bytes, %s says %d", got, ManifestFile, e.size)}
}

// mismatchError is a bundle that contradicts its manifest. It is both
// ErrMismatch and ErrBadBundle.
type mismatchError struct {
	ref    Ref
	path   string
	detail string
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("store: %s refused: %s %s (the bundle is damaged or was changed after it was sealed; no version was stored)", e.ref, e.path, e.detail)
}

func (e *mismatchError) Is(target error) bool { return target == ErrMismatch || target == ErrBadBundle }

// chunkWriter writes new chunks in write transactions of bounded size. It
// is not safe for concurrent use.
type chunkWriter struct {
	s       *Store
	tx      *bolt.Tx
	pending int64    // chunk bytes in tx
	written int64    // chunk bytes committed by this writer
	created []Digest // chunks this writer added, committed or not
}

// importFile streams one file into chunks. It reads at most limit+1 bytes,
// so a file that grows while it is imported is caught by the size check
// without storing what the manifest does not vouch for.
func (w *chunkWriter) importFile(ctx context.Context, root *os.Root, p string, limit int64, advance func(int64)) (File, error) {
	fh, err := root.Open(p)
	if err != nil {
		return File{}, err
	}
	defer fh.Close()
	rec := File{Path: p}
	whole := sha256.New()
	c := newChunker(io.LimitReader(fh, limit+1))
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
	w.created = append(w.created, d)
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

// dropUnreferenced deletes those of the given chunks that no version
// references: the chunks of a refused import. It takes the GC lock, so no
// other import holds unpublished references to them meanwhile.
func (s *Store) dropUnreferenced(ctx context.Context, chunks []Digest) error {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	return s.update(ctx, func(tx *bolt.Tx) error {
		live, err := liveChunks(tx)
		if err != nil {
			return err
		}
		b := tx.Bucket([]byte(bucketChunks))
		for _, d := range chunks {
			if live[d] || b.Bucket(d[:]) == nil {
				continue
			}
			if err := b.DeleteBucket(d[:]); err != nil {
				return fmt.Errorf("chunk %s: %w", d, err)
			}
		}
		return nil
	})
}
