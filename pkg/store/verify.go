package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Damage is one problem Verify found.
type Damage struct {
	Ref    Ref    // zero for an unreferenced chunk
	File   string // empty for a damaged version record
	Chunk  Digest // zero when the problem is not a chunk's
	Reason string
}

func (d Damage) String() string {
	var zero Digest
	s := "unreferenced chunk"
	if d.Ref != (Ref{}) {
		s = "model " + d.Ref.String()
		if d.File != "" {
			s += " file " + d.File
		}
	}
	if d.Chunk != zero {
		s += ": chunk " + d.Chunk.String()
	}
	return s + ": " + d.Reason
}

// VerifyReport summarises a Verify run.
type VerifyReport struct {
	Versions int
	Files    int
	Chunks   int
	Bytes    int64 // chunk bytes re-hashed
	Damaged  []Damage
}

// Verify re-hashes every chunk in the store and checks every version
// record and chunk list, and every version's files against the manifest it
// was imported with (Import refuses a contradiction; a store written by an
// older build may still hold one). Each problem is reported naming the model, version
// and file it hits; when there is any, the error wraps ErrIntegrity. It
// runs in one read transaction: imports proceed meanwhile.
func (s *Store) Verify(ctx context.Context, progress Progress) (VerifyReport, error) {
	var rep VerifyReport
	err := s.view(ctx, func(tx *bolt.Tx) error {
		chunks := tx.Bucket([]byte(bucketChunks))
		// Size the work first (lengths only: no chunk page is read).
		type item struct {
			d    Digest
			data []byte
		}
		var items []item
		var total int64
		err := chunks.ForEach(func(k, _ []byte) error {
			var it item
			if len(k) != sha256.Size {
				rep.Damaged = append(rep.Damaged, Damage{Reason: fmt.Sprintf("chunk key %x is not a sha256", k)})
				return nil
			}
			copy(it.d[:], k)
			it.data = chunkData(chunks, it.d)
			if it.data == nil {
				rep.Damaged = append(rep.Damaged, Damage{Chunk: it.d, Reason: "chunk entry has no data"})
				return nil
			}
			total += int64(len(it.data))
			items = append(items, it)
			return nil
		})
		if err != nil {
			return err
		}
		bad, err := hashN(ctx, len(items), func(i int) (Digest, []byte) { return items[i].d, items[i].data }, total, progress)
		if err != nil {
			return err
		}
		rep.Chunks, rep.Bytes = len(items), total

		referenced := make(map[Digest]bool, len(items))
		err = tx.Bucket([]byte(bucketVersions)).ForEach(func(k, b []byte) error {
			rep.Versions++
			v, err := decodeVersion(b)
			if err != nil {
				name, version, _ := cutKey(k)
				rep.Damaged = append(rep.Damaged, Damage{Ref: Ref{Name: name, Version: version}, Reason: err.Error()})
				return nil
			}
			rep.Damaged = append(rep.Damaged, manifestDamage(v)...)
			for _, f := range v.Files {
				rep.Files++
				for _, c := range f.Chunks {
					referenced[c.SHA256] = true
					why, isBad := bad[c.SHA256]
					if !isBad && chunkData(chunks, c.SHA256) == nil {
						why, isBad = "missing", true
					}
					if isBad {
						rep.Damaged = append(rep.Damaged, Damage{Ref: v.Ref(), File: f.Path, Chunk: c.SHA256, Reason: why})
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for d, why := range bad {
			if !referenced[d] {
				rep.Damaged = append(rep.Damaged, Damage{Chunk: d, Reason: why})
			}
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("store: verify: %w", err)
	}
	if n := len(rep.Damaged); n > 0 {
		return rep, fmt.Errorf("store: verify: %w: %d problem(s), first: %s", ErrIntegrity, n, rep.Damaged[0])
	}
	return rep, nil
}

// manifestDamage compares a version's files with its own edgeinfer.json.
// A manifest without a file list (from before the store required one)
// makes no claim to check.
func manifestDamage(v *Version) []Damage {
	m, err := parseManifest(v.Manifest)
	if err != nil {
		if errors.Is(err, errNoFileList) {
			return nil
		}
		return []Damage{{Ref: v.Ref(), File: ManifestFile, Reason: err.Error()}}
	}
	var out []Damage
	listed := make(map[string]bool, len(m.Files))
	for _, e := range m.Files {
		listed[e.Path] = true
		f, ok := v.File(e.Path)
		switch {
		case !ok:
			out = append(out, Damage{Ref: v.Ref(), File: e.Path, Reason: "listed in " + ManifestFile + " but not stored"})
		case f.Size != e.Size:
			out = append(out, Damage{Ref: v.Ref(), File: e.Path, Reason: fmt.Sprintf("stored %d bytes, %s says %d", f.Size, ManifestFile, e.Size)})
		case f.SHA256 != e.SHA256:
			out = append(out, Damage{Ref: v.Ref(), File: e.Path, Reason: fmt.Sprintf("stored sha256 %s, %s says %s", f.SHA256, ManifestFile, e.SHA256)})
		}
	}
	for _, f := range v.Files {
		if f.Path != ManifestFile && !listed[f.Path] {
			out = append(out, Damage{Ref: v.Ref(), File: f.Path, Reason: "stored but not listed in " + ManifestFile})
		}
	}
	return out
}

func cutKey(k []byte) (string, string, bool) {
	for i, c := range k {
		if c == 0 {
			return string(k[:i]), string(k[i+1:]), true
		}
	}
	return string(k), "", false
}

// hashN re-hashes n chunks on all CPUs and returns the digests that do
// not match, with a reason. Every worker is joined before it returns, so
// no goroutine touches the memory map after the transaction ends.
func hashN(ctx context.Context, n int, at func(i int) (Digest, []byte), total int64, progress Progress) (map[Digest]string, error) {
	var (
		mu   sync.Mutex
		bad  = map[Digest]string{}
		done int64
		next int
		wg   sync.WaitGroup
	)
	workers := min(runtime.GOMAXPROCS(0), max(n, 1))
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n || ctx.Err() != nil {
					return
				}
				d, data := at(i)
				sum := Digest(sha256.Sum256(data))
				mu.Lock()
				if sum != d {
					bad[d] = "content does not match its sha256"
				}
				done += int64(len(data))
				if progress != nil {
					progress(done, total)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return bad, nil
}
