package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Top-level buckets the store itself owns. Owner buckets (Store.Update,
// Store.View) may not start with reservedPrefix.
const (
	reservedPrefix = "store."
	bucketChunks   = "store.chunks"   // sha256 -> sub-bucket {"d": bytes}
	bucketVersions = "store.versions" // name\x00version -> Version record
	bucketModels   = "store.models"   // name -> pointers record
	bucketMeta     = "store.meta"     // "schema" -> schemaVersion
)

const schemaVersion = "1"

// chunkDataKey is the one key inside a chunk's sub-bucket. Each chunk lives
// in its own sub-bucket so that its (large) value sits alone on its own
// pages: in one flat bucket bbolt keeps at least two values per leaf and
// rewrites neighbouring megabyte values on every insert, which multiplied
// import writes and pulled old chunks into memory.
var chunkDataKey = []byte("d")

// Options configure Open. The zero value is usable.
type Options struct {
	// LockTimeout bounds the wait for another process to release the
	// store file; zero means one second. Open then fails with ErrLocked.
	LockTimeout time.Duration
	// TxBytes bounds the chunk bytes written per transaction during
	// import, which bounds import memory; zero means 8 MiB.
	TxBytes int64
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// MustExist makes Open fail with ErrNoStore instead of creating the
	// file (or its directory) when there is none: for callers that only
	// read, so that a mistyped path is an error rather than a new, empty
	// store in which every model is missing. False (the zero value)
	// creates the store.
	MustExist bool
}

// Store is a content-addressed model store in one bbolt file. It is safe for
// concurrent use by multiple goroutines; only one process may open a file
// at a time.
type Store struct {
	db   *bolt.DB
	path string
	opts Options
	log  *slog.Logger

	// gcMu keeps GC from sweeping chunks that an import has written but
	// not yet published: imports hold it shared, GC exclusively.
	gcMu sync.RWMutex

	closeOnce sync.Once
	closeErr  error
}

// Open opens or creates the store file at path (its directory is created);
// with Options.MustExist it only opens one that exists.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	if opts.TxBytes <= 0 {
		opts.TxBytes = 8 << 20
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	bopts := &bolt.Options{
		Timeout:      opts.LockTimeout,
		FreelistType: bolt.FreelistMapType, // large stores free many pages
	}
	if opts.MustExist {
		// bbolt always asks for O_CREATE; dropping it here (rather than a
		// Stat before Open) leaves no window for the file to appear.
		bopts.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
			return os.OpenFile(name, flag&^os.O_CREATE, perm)
		}
	} else if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, wrapIOErr(err))
	}
	db, err := bolt.Open(path, 0o600, bopts)
	if opts.MustExist && errors.Is(err, fs.ErrNotExist) {
		return nil, noStoreError(path)
	}
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, lockedError(path)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, wrapIOErr(err))
	}
	// bbolt grows the file by AllocSize (16 MiB by default) beyond what it
	// needs once the map passes that size: a whole small model's worth of
	// headroom on a device whose disk is measured in bundles. 4 MiB keeps
	// growth to one truncate per few import transactions.
	db.AllocSize = 4 << 20
	s := &Store{db: db, path: path, opts: opts, log: log}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{bucketChunks, bucketVersions, bucketModels, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return err
			}
		}
		meta := tx.Bucket([]byte(bucketMeta))
		switch v := meta.Get([]byte("schema")); {
		case v == nil:
			return meta.Put([]byte("schema"), []byte(schemaVersion))
		case string(v) != schemaVersion:
			return fmt.Errorf("schema %q, this build reads %q", v, schemaVersion)
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("store: open %s: %w", path, wrapIOErr(err)), db.Close())
	}
	return s, nil
}

// noStoreError is ErrNoStore and fs.ErrNotExist, naming the path.
type noStoreError string

func (e noStoreError) Error() string { return "store: " + string(e) + " does not exist" }

func (e noStoreError) Is(target error) bool { return target == ErrNoStore || target == fs.ErrNotExist }

// Path returns the store file's path.
func (s *Store) Path() string { return s.path }

// ExportDir is where a version is exported as plain files for a runtime
// that wants paths (<store>.models/<name>@<version>): one place, so that
// the engine that exports and the update agent that prunes agree.
func (s *Store) ExportDir(r Ref) string {
	return filepath.Join(s.path+".models", r.Name+"@"+r.Version)
}

// Close closes the store. It waits for running transactions and is
// idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("store: close: %w", err)
		}
	})
	return s.closeErr
}

// update and view run bbolt transactions, mapping bbolt's closed-database
// error and ENOSPC to the store's sentinels.
func (s *Store) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.mapErr(s.db.Update(fn))
}

func (s *Store) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.mapErr(s.db.View(fn))
}

func (s *Store) mapErr(err error) error {
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return wrapIOErr(err)
}

// wrapIOErr adds ErrNoSpace to errors caused by a full file system, keeping
// the original (and its syscall.ENOSPC) in the chain.
func wrapIOErr(err error) error {
	if err != nil && errors.Is(err, syscall.ENOSPC) && !errors.Is(err, ErrNoSpace) {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return err
}

// Stats describes the store's contents.
type Stats struct {
	Models     int   // names with an active or previous version
	Versions   int   // version records
	Chunks     int   // distinct chunks, referenced or not
	ChunkBytes int64 // bytes of chunk data (what deduplication saves on)
	FileBytes  int64 // size of the bbolt file
}

// Stats counts the store's models, versions and chunks.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := s.view(ctx, func(tx *bolt.Tx) error {
		st.Models = tx.Bucket([]byte(bucketModels)).Stats().KeyN
		st.Versions = tx.Bucket([]byte(bucketVersions)).Stats().KeyN
		st.FileBytes = tx.Size()
		chunks := tx.Bucket([]byte(bucketChunks))
		return chunks.ForEach(func(k, _ []byte) error {
			st.Chunks++
			if b := chunks.Bucket(k); b != nil {
				st.ChunkBytes += int64(len(b.Get(chunkDataKey)))
			}
			return nil
		})
	})
	if err != nil {
		return Stats{}, fmt.Errorf("store: stats: %w", err)
	}
	return st, nil
}
