// Package update keeps a device's models up to date from signed releases:
// TUF 1.0 metadata verified by go-tuf (github.com/theupdateframework/go-tuf/v2),
// the bundle's chunks moved into the model store (pkg/store) asking only
// for those it lacks, a health check of the new version against its golden
// output, an atomic switch, and a way back.
//
// # Releases
//
// A release is a TUF target named "NAME/VERSION" in the image repository.
// The target's length and sha256 are those of the bundle's edgeinfer.json;
// its custom field "edgeinfer" (Release) lists every file with its chunk
// list (sha256 and size of each), a counter that only grows, the boards,
// execution providers and SDK range it is for, and the health check. The
// root of the image repository is pinned on the device at provisioning;
// later roots are reached by the rotations each root signs.
//
// With Config.DirectorRoot set, a second TUF repository, the director
// (Uptane's split), says which device installs which release: a target it
// assigns must be signed by the image repository with the same length and
// hashes, and the release is read from the image repository's copy, so a
// compromised director (a rollout gone wrong) cannot make a device install
// anything the release keys did not sign.
//
// # Transport
//
// A Source delivers metadata files and chunks: FileSource (a directory),
// HTTPSource (any static HTTPS host, a CDN, nginx) and MQTTSource (the
// device's link, through a Requester: one request topic for metadata, one
// for chunks; ServeRequest is the server's side). go-tuf's updater reads
// metadata through a pluggable fetcher over the Source. All three are
// RangeSources: under Config.MaxBytesPerSec the agent fetches each chunk
// in pieces, each requested only when its bytes are due, so the cap holds
// on the wire (TestCapHoldsOnTheWire); a transfer cut mid-chunk keeps the
// pieces that came, and the next asks only for the rest
// (TestResumeWithinChunk). The layout is the same everywhere:
//
//	image/N.root.json  image/timestamp.json  image/N.snapshot.json  image/N.targets.json
//	director/…         chunks/ab/abcdef…     (a chunk's bytes under its sha256)
//
// # What is refused
//
// Each row is a case of TestAttacks; the release is refused with the
// sentinel named, a "refused" event carries the reason, and the active
// version stays:
//
//	rollback of metadata (an older timestamp)        ErrRollback (go-tuf)
//	rollback of the release (counter below the
//	  installed one, no director)                    ErrRollback
//	freeze (expired timestamp; clock gone back)      ErrFreeze
//	mix-and-match (targets not of this snapshot)     ErrMixAndMatch
//	edited release, threshold not met, key not in
//	  root, key revoked by a root rotation           ErrSignature
//	endless metadata or chunk (cut while reading)    ErrTooLarge
//	tampered chunk                                   ErrTampered
//	wrong board, provider, SDK out of range          ErrIncompatible
//	director assigns an unsigned target              ErrNotSigned
//
// # Rollbacks that are not attacks
//
// The counter keeps the image repository (or a thief of its targets key)
// from pushing a device back to an older release. A rollback an operator
// decides is no attack: with a director, the director chooses which
// signed release each device runs (Uptane), so an older release it assigns
// to this device is installed, and a device rolled back by the fleet's
// rollback command (Agent.Rollback) finds the director's assignment of the
// release it now runs up to date. installed/NAME follows the active
// version down; the release rolled back from is kept out by a floor
// (rolledback/NAME), and any release with a higher counter installs
// (TestOperatorRollbackThenRestart). Replaying the director's older
// metadata is still refused (TestDirectorReplayStillRefused).
//
// Lengths are enforced while reading: metadata at go-tuf's limits (16 KiB
// timestamp, 2 MB snapshot, 5 MB targets, 512 kB root) or the length the
// signed metadata gives, chunks at their signed size plus one byte.
//
// # Time on boards without a real-time clock
//
// Expiry is checked against max(clock, floor), the floor being the latest
// time the device has read from its clock at any check, capped at the
// expiry of the newest timestamp it trusted (kept in the journal). A board
// that boots in 1970 therefore still refuses metadata that had expired
// when it last looked; one reading of a clock far in the future cannot
// make every later timestamp look expired (TestClockFromTheFuture). What
// the floor cannot do is notice metadata that expired while the clock
// stood still. Such boards should set their clock
// (NTP, GNSS, the link) before updating; the floor is the fallback.
//
// # Transfer and activation
//
// Apply: Check (refresh, select, check compatibility and counter) →
// offered → chunks the store lacks, each checked against its sha256 as it
// lands and written durably but invisibly (store.Stager) at up to
// Config.MaxBytesPerSec → verified (every file re-hashed from its chunks)
// → staged (a version, not active) → the Activator loads it beside the
// running version and runs the health check (golden prompt, expected
// tokens within MinMatchPercent, MaxLatencyMS) → health_ok → the store's
// active pointer moves → active. A failed check sends health_failed with
// the figures and rolled_back, and keeps the running version. Every step
// is journaled in the store's "update" bucket in one transaction with the
// counters, so after a kill Resume continues (only missing chunks are
// fetched) or abandons an update that no longer applies
// (TestKillDuringUpdate).
//
// The Activators that meet the engine are runtime/device's, so this
// package links no engine and builds without cgo: EngineActivator uses
// the engine's run-time swap (running requests finish on the old version;
// TestSwapWhileServing); CheckActivator checks in an engine of its own for
// a process that does not serve (the CLI).
//
// Figures: TestDeltaFigures (wire bytes per changed byte, publish to
// active), BenchmarkChunkVerify, BenchmarkMetadataRefresh.
//
// An Agent is safe for concurrent use; updates run one at a time.
package update
