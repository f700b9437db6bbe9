package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Tx is a transaction scoped to one owner bucket (the MQTT outbox, the OTA
// agent's journal, ...): it sees only that bucket, so owners cannot touch
// each other's data or the store's. Slices returned by Get and passed to
// ForEach are valid only until the function given to Update or View
// returns; copy what you keep. A Tx must only be used inside that function
// and is not safe for concurrent use.
type Tx struct {
	b *bolt.Bucket // nil in a View of a bucket never written: empty
}

// errReadOnly is what writes in a View return.
var errReadOnly = errors.New("store: write in a read-only transaction")

// Get returns the value of key, or nil.
func (t *Tx) Get(key []byte) []byte {
	if t.b == nil {
		return nil
	}
	return t.b.Get(key)
}

// Put sets key to value (Update only). value must stay unchanged until
// the transaction ends.
func (t *Tx) Put(key, value []byte) error {
	if t.b == nil {
		return errReadOnly
	}
	return t.b.Put(key, value)
}

// Delete removes key (Update only); deleting a missing key is not an error.
func (t *Tx) Delete(key []byte) error {
	if t.b == nil {
		return errReadOnly
	}
	return t.b.Delete(key)
}

// ForEach calls fn for each key at or after start (nil: from the first),
// in byte order, until fn returns an error or false.
func (t *Tx) ForEach(start []byte, fn func(key, value []byte) (bool, error)) error {
	if t.b == nil {
		return nil
	}
	c := t.b.Cursor()
	k, v := c.First()
	if start != nil {
		k, v = c.Seek(start)
	}
	for ; k != nil; k, v = c.Next() {
		more, err := fn(k, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// NextSequence returns the bucket's next sequence number (Update only;
// starts at 1, durable with the transaction, never reused).
func (t *Tx) NextSequence() (uint64, error) {
	if t.b == nil {
		return 0, errReadOnly
	}
	return t.b.NextSequence()
}

// Append stores value under the next sequence number, as an 8-byte
// big-endian key so ForEach visits entries in append order: a durable
// journal or outbox. It returns the sequence number.
func (t *Tx) Append(value []byte) (uint64, error) {
	seq, err := t.NextSequence()
	if err != nil {
		return 0, err
	}
	return seq, t.b.Put(SeqKey(seq), value)
}

// SeqKey is the key Append uses for sequence number seq.
func SeqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// Update runs fn in a read-write transaction on the owner bucket named
// bucket (created on first use). The transaction commits, durably, when fn
// returns nil and rolls back otherwise. Update calls are serialised with
// every other write to the store; keep fn short.
func (s *Store) Update(ctx context.Context, bucket string, fn func(*Tx) error) error {
	if err := checkOwnerBucket(bucket); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		return fn(&Tx{b: b})
	})
	if err != nil {
		return fmt.Errorf("store: update %s: %w", bucket, err)
	}
	return nil
}

// View runs fn in a read-only transaction on the owner bucket. A bucket
// never written reads as empty. Views run concurrently with each other
// and with writers.
func (s *Store) View(ctx context.Context, bucket string, fn func(*Tx) error) error {
	if err := checkOwnerBucket(bucket); err != nil {
		return err
	}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return fn(&Tx{b: tx.Bucket([]byte(bucket))})
	})
	if err != nil {
		return fmt.Errorf("store: view %s: %w", bucket, err)
	}
	return nil
}

func checkOwnerBucket(name string) error {
	if name == "" || strings.HasPrefix(name, reservedPrefix) {
		return fmt.Errorf("%w: %q (names starting with %q belong to the store)", ErrReservedBucket, name, reservedPrefix)
	}
	return nil
}
