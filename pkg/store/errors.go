package store

import "errors"

// Sentinel errors. Operations wrap them with %w and the operation, the model
// and the file concerned, so callers test with errors.Is.
var (
	// ErrNotFound: no such model, version or file.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: the version is already in the store with different content.
	ErrExists = errors.New("store: version already exists")
	// ErrIntegrity: stored bytes no longer match their digest (or a record
	// is damaged). The error names the model, version and file.
	ErrIntegrity = errors.New("store: integrity check failed")
	// ErrNoSpace: the file system is full (it wraps syscall.ENOSPC). The
	// store is left intact; run GC after freeing space.
	ErrNoSpace = errors.New("store: no space left on device")
	// ErrLocked: another process holds the store file open.
	ErrLocked = errors.New("store: in use by another process")
	// ErrBadBundle: the bundle directory or its edgeinfer.json is unusable.
	ErrBadBundle = errors.New("store: bad bundle")
	// ErrMismatch: a bundle's files contradict its edgeinfer.json (a file
	// unlisted, missing, or of another size or sha256). The error names the
	// file and what was expected and found; it also matches ErrBadBundle.
	ErrMismatch = errors.New("store: bundle does not match its manifest")
	// ErrNoStore: Options.MustExist was set and there is no store file.
	// It also matches fs.ErrNotExist.
	ErrNoStore = errors.New("store: no such store")
	// ErrBadRef: a "name[@version]" reference or a name does not parse.
	ErrBadRef = errors.New("store: bad model reference")
	// ErrActive: the version is active and cannot be removed.
	ErrActive = errors.New("store: version is active")
	// ErrNoPrevious: rollback asked for with no previous version recorded.
	ErrNoPrevious = errors.New("store: no previous version")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("store: closed")
	// ErrReservedBucket: an owner asked for a bucket name the store uses.
	ErrReservedBucket = errors.New("store: reserved bucket name")
)
