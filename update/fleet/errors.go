package fleet

import "errors"

// Sentinel errors.
var (
	// ErrRepo: the repository directory is missing, damaged or not one.
	ErrRepo = errors.New("fleet: bad repository")
	// ErrKeys: the signing keys at hand cannot meet a role's threshold.
	ErrKeys = errors.New("fleet: not enough signing keys")
	// ErrBundle: the bundle to publish is unusable.
	ErrBundle = errors.New("fleet: bad bundle")
	// ErrTarget: no such release in the repository.
	ErrTarget = errors.New("fleet: no such release")
)
