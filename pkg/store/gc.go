package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// gcBatch bounds the chunks deleted per transaction.
const gcBatch = 256

// GCReport says what GC freed.
type GCReport struct {
	Chunks int
	Bytes  int64
}

// GC deletes chunks that no version references (mark and sweep: the marks
// are recomputed from the version records each time, so there is no
// reference count to drift after a crash). It waits for running imports
// and blocks new ones while it runs. A damaged version record stops GC
// with ErrIntegrity rather than sweeping chunks that record may name.
func (s *Store) GC(ctx context.Context) (GCReport, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	var rep GCReport
	var garbage [][]byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		live, err := liveChunks(tx)
		if err != nil {
			return err
		}
		chunks := tx.Bucket([]byte(bucketChunks))
		return chunks.ForEach(func(k, _ []byte) error {
			if len(k) == len(Digest{}) && live[Digest(k)] {
				return nil
			}
			garbage = append(garbage, bytes.Clone(k))
			if b := chunks.Bucket(k); b != nil {
				rep.Bytes += int64(len(b.Get(chunkDataKey)))
			}
			return nil
		})
	})
	if err != nil {
		return GCReport{}, fmt.Errorf("store: gc: %w", err)
	}
	for len(garbage) > 0 {
		n := min(gcBatch, len(garbage))
		err := s.update(ctx, func(tx *bolt.Tx) error {
			chunks := tx.Bucket([]byte(bucketChunks))
			for _, d := range garbage[:n] {
				err := chunks.DeleteBucket(d)
				if errors.Is(err, bolterrors.ErrIncompatibleValue) {
					err = chunks.Delete(d) // a damaged plain value, not a chunk
				}
				if err != nil {
					return fmt.Errorf("chunk %x: %w", d, err)
				}
			}
			return nil
		})
		if err != nil {
			return rep, fmt.Errorf("store: gc: %w", err)
		}
		rep.Chunks += n
		garbage = garbage[n:]
	}
	return rep, nil
}

// liveChunks marks every chunk a version record names. A damaged record is
// an error: sweeping without its marks could delete chunks it needs.
func liveChunks(tx *bolt.Tx) (map[Digest]bool, error) {
	live := map[Digest]bool{}
	err := tx.Bucket([]byte(bucketVersions)).ForEach(func(k, b []byte) error {
		v, err := decodeVersion(b)
		if err != nil {
			name, version, _ := cutKey(k)
			return fmt.Errorf("%s: %w", Ref{Name: name, Version: version}, err)
		}
		for _, f := range v.Files {
			for _, c := range f.Chunks {
				live[c.SHA256] = true
			}
		}
		return nil
	})
	return live, err
}
