package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Split cuts r into the store's content-defined chunks and calls fn with
// each chunk's digest and bytes (valid only during the call). It returns
// the file record (size, SHA-256, chunk list) that Import would have
// written for the same bytes, so a publisher off the device lists exactly
// the chunks a device's store will hold.
func Split(r io.Reader, fn func(c Chunk, data []byte) error) (File, error) {
	var f File
	whole := sha256.New()
	c := newChunker(r)
	for {
		data, err := c.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return File{}, err
		}
		whole.Write(data)
		ch := Chunk{SHA256: sha256.Sum256(data), Size: int64(len(data))}
		if fn != nil {
			if err := fn(ch, data); err != nil {
				return File{}, err
			}
		}
		f.Chunks = append(f.Chunks, ch)
		f.Size += ch.Size
	}
	copy(f.SHA256[:], whole.Sum(nil))
	return f, nil
}

// MaxChunk is the largest chunk the store cuts or accepts.
const MaxChunk = maxChunk

// Stager receives a version chunk by chunk (an over-the-air update) and
// publishes it once every chunk is in. Each PutChunk is its own durable
// transaction, so an update interrupted by a crash keeps the chunks that
// landed and resumes by asking Missing again. Until Publish the chunks are
// orphans: no version names them, nothing reads them.
//
// While a Stager is open, GC in this process waits (it would sweep the
// staged chunks). After a restart a GC that runs before the update resumes
// may sweep them; Missing then lists them again and they are fetched anew.
// A Stager is safe for concurrent use; Close it when done.
type Stager struct {
	s         *Store
	closeOnce sync.Once
}

// Stage opens a Stager. It blocks while a GC runs.
func (s *Store) Stage() *Stager {
	s.gcMu.RLock()
	return &Stager{s: s}
}

// Close releases the Stager (it lets GC run again). It is idempotent.
func (st *Stager) Close() error {
	st.closeOnce.Do(st.s.gcMu.RUnlock)
	return nil
}

// Missing returns the chunks of files the store does not hold, each once,
// in the order they first appear.
func (st *Stager) Missing(ctx context.Context, files []File) ([]Chunk, error) {
	var out []Chunk
	err := st.s.view(ctx, func(tx *bolt.Tx) error {
		chunks := tx.Bucket([]byte(bucketChunks))
		seen := map[Digest]bool{}
		for _, f := range files {
			for _, c := range f.Chunks {
				if seen[c.SHA256] {
					continue
				}
				seen[c.SHA256] = true
				if chunks.Bucket(c.SHA256[:]) == nil {
					out = append(out, c)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: missing chunks: %w", err)
	}
	return out, nil
}

// PutChunk stores data as the chunk with digest want, durably, after
// checking that data hashes to want and is no larger than MaxChunk: a
// mismatch is ErrIntegrity and nothing is written.
func (st *Stager) PutChunk(ctx context.Context, want Digest, data []byte) error {
	if len(data) == 0 || len(data) > maxChunk {
		return fmt.Errorf("%w: chunk %s has %d bytes (1 to %d allowed)", ErrIntegrity, want, len(data), maxChunk)
	}
	if got := Digest(sha256.Sum256(data)); got != want {
		return fmt.Errorf("%w: chunk %s arrived with sha256 %s", ErrIntegrity, want, got)
	}
	err := st.s.update(ctx, func(tx *bolt.Tx) error {
		chunks := tx.Bucket([]byte(bucketChunks))
		if chunks.Bucket(want[:]) != nil {
			return nil
		}
		b, err := chunks.CreateBucket(want[:])
		if err != nil {
			return err
		}
		b.FillPercent = 1
		return b.Put(chunkDataKey, data)
	})
	if err != nil {
		return fmt.Errorf("store: put chunk %s: %w", want, err)
	}
	return nil
}

// Publish makes the staged files a version, named by the edgeinfer.json
// among them, without activating it (the caller activates after its health
// check, even for a name's first version). Every file is re-hashed from
// its stored chunks against its recorded size and SHA-256 first: a file
// whose chunks are missing or do not add up is ErrIntegrity (or
// ErrNotFound for a missing chunk) and nothing is published. The files
// must then be exactly those the manifest lists, with its sizes and
// digests, or Publish refuses with ErrMismatch as Import does. Publishing an
// identical version again is a no-op.
func (st *Stager) Publish(ctx context.Context, files []File) (Ref, error) {
	v := &Version{Files: files}
	var manifest []byte
	err := st.s.view(ctx, func(tx *bolt.Tx) error {
		chunks := tx.Bucket([]byte(bucketChunks))
		for i := range files {
			f := &files[i]
			h := sha256.New()
			var n int64
			var buf bytes.Buffer
			for _, c := range f.Chunks {
				if err := ctx.Err(); err != nil {
					return err
				}
				data := chunkData(chunks, c.SHA256)
				if data == nil {
					return fmt.Errorf("%w: %s: chunk %s is not in the store", ErrNotFound, f.Path, c.SHA256)
				}
				h.Write(data)
				n += int64(len(data))
				if f.Path == ManifestFile && n <= maxManifest {
					buf.Write(data)
				}
			}
			if n != f.Size || Digest(h.Sum(nil)) != f.SHA256 {
				return fmt.Errorf("%w: %s: chunks give %d bytes with sha256 %x, the file is %d bytes with sha256 %s",
					ErrIntegrity, f.Path, n, h.Sum(nil), f.Size, f.SHA256)
			}
			v.Size += n
			if f.Path == ManifestFile {
				manifest = bytes.TrimSpace(buf.Bytes())
			}
		}
		return nil
	})
	if err != nil {
		return Ref{}, fmt.Errorf("store: publish staged version: %w", err)
	}
	if manifest == nil {
		return Ref{}, fmt.Errorf("%w: staged files have no %s", ErrBadBundle, ManifestFile)
	}
	m, err := parseManifest(manifest)
	if err != nil {
		return Ref{}, err
	}
	ref := m.ref()
	// The chunks add up to the files the sender listed; the manifest must
	// vouch for those same files, as Import requires of a directory.
	if err := matchManifest(ref, m, files); err != nil {
		return Ref{}, err
	}
	v.Name, v.Version, v.Manifest = ref.Name, ref.Version, manifest
	v.Imported = time.Now().UTC()
	if err := v.validate(); err != nil {
		return Ref{}, fmt.Errorf("%w: %s: %v", ErrBadBundle, ref, err)
	}
	if err := st.s.publish(ctx, v, false); err != nil {
		return Ref{}, fmt.Errorf("store: publish %s: %w", ref, err)
	}
	return ref, nil
}

// ReadChunk returns a copy of the chunk with digest d, re-hashed: a chunk
// that no longer matches is ErrIntegrity, an absent one ErrNotFound. A
// publisher or a chunk server reads a store through it.
func (s *Store) ReadChunk(ctx context.Context, d Digest) ([]byte, error) {
	var out []byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		data := chunkData(tx.Bucket([]byte(bucketChunks)), d)
		if data == nil {
			return fmt.Errorf("%w: chunk %s", ErrNotFound, d)
		}
		out = bytes.Clone(data)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: read chunk: %w", err)
	}
	if Digest(sha256.Sum256(out)) != d {
		return nil, fmt.Errorf("%w: chunk %s", ErrIntegrity, d)
	}
	return out, nil
}
