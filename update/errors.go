package update

import "errors"

// Sentinel errors. Every refusal of a release wraps ErrRefused and one of
// the specific reasons below, with the operation and what was wrong, so a
// caller tests with errors.Is and a report carries the message.
var (
	// ErrRefused: the release was refused; nothing of it was activated.
	ErrRefused = errors.New("update: release refused")
	// ErrRollback: metadata older than what the device already trusts, or
	// a release counter not above the installed one.
	ErrRollback = errors.New("update: rollback to older metadata or release")
	// ErrFreeze: expired metadata (a repository frozen in the past).
	ErrFreeze = errors.New("update: metadata expired")
	// ErrMixAndMatch: metadata files that do not belong to one snapshot.
	ErrMixAndMatch = errors.New("update: metadata from different snapshots")
	// ErrSignature: a bad signature, too few valid signatures for the
	// role's threshold, or signatures by keys the root does not list.
	ErrSignature = errors.New("update: signature check failed")
	// ErrTooLarge: a source sent more bytes than the signed length (or the
	// configured maximum); the download stopped there.
	ErrTooLarge = errors.New("update: more data than allowed")
	// ErrTampered: content that does not hash to its signed digest.
	ErrTampered = errors.New("update: content does not match its signed digest")
	// ErrIncompatible: the release is not for this device (board,
	// execution provider, SDK version range).
	ErrIncompatible = errors.New("update: release not for this device")
	// ErrNotSigned: the director assigned a target the release keys did
	// not sign (or signed differently).
	ErrNotSigned = errors.New("update: assignment names a target the release keys did not sign")
	// ErrBadMetadata: metadata or a release's custom fields do not parse
	// or are inconsistent.
	ErrBadMetadata = errors.New("update: bad release metadata")
	// ErrHealth: the new version failed its health check; the running
	// version stays.
	ErrHealth = errors.New("update: health check failed")
	// ErrNotFound: a source has no such file or chunk.
	ErrNotFound = errors.New("update: not found")
	// ErrSource: the transport failed (retry later; nothing is refused).
	ErrSource = errors.New("update: source unavailable")
	// ErrConfig: the agent's configuration is unusable.
	ErrConfig = errors.New("update: bad configuration")
	// ErrNoUpdate: nothing newer than the installed version is offered.
	ErrNoUpdate = errors.New("update: no update")
	// ErrNoRelease: the image repository signs no release of the model at
	// all: a misspelt model name, or one never published. Not "up to
	// date": nothing can ever be installed until that changes.
	ErrNoRelease = errors.New("update: no release is signed for model")
	// ErrNotActive: a rollback named the release it undoes, and that
	// release is not the one active (never taken, or already left).
	ErrNotActive = errors.New("update: the release to roll back from is not active")
)
