package store

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"time"

	bolt "go.etcd.io/bbolt"
)

func getPointers(tx *bolt.Tx, name string) (pointers, error) {
	b := tx.Bucket([]byte(bucketModels)).Get([]byte(name))
	if b == nil {
		return pointers{}, nil
	}
	p, err := decodePointers(b)
	if err != nil {
		return pointers{}, fmt.Errorf("model %s: %w", name, err)
	}
	return p, nil
}

func putPointers(tx *bolt.Tx, name string, p pointers) error {
	models := tx.Bucket([]byte(bucketModels))
	if p.Active == "" && p.Previous == "" {
		return models.Delete([]byte(name))
	}
	rec, err := encodeRecord(p)
	if err != nil {
		return err
	}
	return models.Put([]byte(name), rec)
}

// resolveTx turns a reference with or without a version into the stored
// version record.
func resolveTx(tx *bolt.Tx, r Ref) (*Version, error) {
	if r.Version == "" {
		p, err := getPointers(tx, r.Name)
		if err != nil {
			return nil, err
		}
		if p.Active == "" {
			return nil, fmt.Errorf("%w: model %s has no active version", ErrNotFound, r.Name)
		}
		r.Version = p.Active
	}
	b := tx.Bucket([]byte(bucketVersions)).Get(versionKey(r))
	if b == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, r)
	}
	v, err := decodeVersion(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	return v, nil
}

// Resolve parses "name" or "name@version" and returns the stored version
// (a bare name means the active version).
func (s *Store) Resolve(ctx context.Context, ref string) (*Version, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	var v *Version
	err = s.view(ctx, func(tx *bolt.Tx) error {
		v, err = resolveTx(tx, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: resolve %s: %w", ref, err)
	}
	return v, nil
}

// Entry is one row of List: a stored version and its role.
type Entry struct {
	Ref      Ref
	Size     int64
	Files    int
	Imported time.Time // UTC
	Active   bool
	Previous bool
	// Err is set when the version record is damaged; Ref is then still
	// filled from its key.
	Err error
}

// List yields every stored version ordered by name then version. The
// sequence runs inside one read transaction; a damaged record is yielded
// with Entry.Err set rather than ending the listing.
func (s *Store) List(ctx context.Context) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		var entries []Entry
		err := s.view(ctx, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(bucketVersions)).ForEach(func(k, b []byte) error {
				name, version, _ := bytes.Cut(k, []byte{0})
				e := Entry{Ref: Ref{Name: string(name), Version: string(version)}}
				v, err := decodeVersion(b)
				if err != nil {
					e.Err = fmt.Errorf("%s: %w", e.Ref, err)
				} else {
					e.Size, e.Files, e.Imported = v.Size, len(v.Files), v.Imported
				}
				p, err := getPointers(tx, e.Ref.Name)
				if err != nil && e.Err == nil {
					e.Err = err
				}
				e.Active = p.Active == e.Ref.Version
				e.Previous = p.Previous == e.Ref.Version
				entries = append(entries, e)
				return nil
			})
		})
		// Yield outside the transaction: a caller that imports while
		// iterating must not deadlock against bbolt's remap lock.
		if err != nil {
			yield(Entry{}, fmt.Errorf("store: list: %w", err))
			return
		}
		for _, e := range entries {
			if !yield(e, nil) {
				return
			}
		}
	}
}

// Activate makes name@version the active version of its name; the version
// active before it becomes the previous one (the rollback target). It is
// one transaction.
func (s *Store) Activate(ctx context.Context, ref string) error {
	r, err := ParseRef(ref)
	if err != nil {
		return err
	}
	if r.Version == "" {
		return fmt.Errorf("%w: activate needs name@version, got %q", ErrBadRef, ref)
	}
	err = s.update(ctx, func(tx *bolt.Tx) error {
		if _, err := resolveTx(tx, r); err != nil {
			return err
		}
		p, err := getPointers(tx, r.Name)
		if err != nil {
			return err
		}
		if p.Active == r.Version {
			return nil
		}
		p.Previous, p.Active = p.Active, r.Version
		return putPointers(tx, r.Name, p)
	})
	if err != nil {
		return fmt.Errorf("store: activate %s: %w", ref, err)
	}
	return nil
}

// Rollback swaps the active and previous versions of name, in one
// transaction, and returns the now active reference.
func (s *Store) Rollback(ctx context.Context, name string) (Ref, error) {
	if err := checkIdent("name", name); err != nil {
		return Ref{}, err
	}
	var out Ref
	err := s.update(ctx, func(tx *bolt.Tx) error {
		p, err := getPointers(tx, name)
		if err != nil {
			return err
		}
		if p.Previous == "" {
			return ErrNoPrevious
		}
		if _, err := resolveTx(tx, Ref{Name: name, Version: p.Previous}); err != nil {
			return err
		}
		p.Active, p.Previous = p.Previous, p.Active
		out = Ref{Name: name, Version: p.Active}
		return putPointers(tx, name, p)
	})
	if err != nil {
		return Ref{}, fmt.Errorf("store: rollback %s: %w", name, err)
	}
	return out, nil
}

// Remove deletes the version record name@version. The active version
// cannot be removed (ErrActive) unless it is the name's only one; removing the previous one clears the
// rollback target. Chunks are freed by the next GC.
func (s *Store) Remove(ctx context.Context, ref string) error {
	r, err := ParseRef(ref)
	if err != nil {
		return err
	}
	if r.Version == "" {
		return fmt.Errorf("%w: remove needs name@version, got %q", ErrBadRef, ref)
	}
	err = s.update(ctx, func(tx *bolt.Tx) error {
		versions := tx.Bucket([]byte(bucketVersions))
		if versions.Get(versionKey(r)) == nil {
			return fmt.Errorf("%w: %s", ErrNotFound, r)
		}
		p, err := getPointers(tx, r.Name)
		if err != nil {
			return err
		}
		if p.Active == r.Version {
			if hasOtherVersion(versions, r) {
				return ErrActive
			}
			p.Active = "" // the last version of the name goes, and its pointers
		}
		if p.Previous == r.Version {
			p.Previous = ""
		}
		if err := putPointers(tx, r.Name, p); err != nil {
			return err
		}
		return versions.Delete(versionKey(r))
	})
	if err != nil {
		return fmt.Errorf("store: remove %s: %w", ref, err)
	}
	return nil
}

func hasOtherVersion(versions *bolt.Bucket, r Ref) bool {
	prefix := []byte(r.Name + "\x00")
	c := versions.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if string(k[len(prefix):]) != r.Version {
			return true
		}
	}
	return false
}
