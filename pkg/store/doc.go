// Package store is the device's offline model store: one bbolt file holding
// content-addressed chunks, model versions, active/previous pointers, and
// buckets for other owners (the MQTT outbox, the OTA agent's journal). It is
// the only package that imports bbolt.
//
// # Layout
//
// Top-level buckets:
//
//	store.chunks    sha256 -> sub-bucket {"d": chunk bytes}
//	store.versions  name \x00 version -> record: sha256(json) ++ json(Version)
//	store.models    name -> record: {active, previous}
//	store.meta      "schema" -> "1"
//	<owner>         whatever Store.Update/View callers keep (not "store.*")
//
// A file is an ordered chunk list plus its size and SHA-256; a Version is
// the bundle's edgeinfer.json, kept verbatim (the store reads only "name",
// "version" and the "files" list), plus the import time, total size and
// files. Each chunk has
// its own sub-bucket so that its value sits alone on its pages: in a flat
// bucket bbolt keeps at least two values per leaf and rewrites neighbouring
// megabyte values on every insert. Records carry their own SHA-256 because
// bbolt checksums nothing but its meta pages.
//
// # Chunking: content-defined
//
// Files are cut with FastCDC (gear hash, normalised chunking): min 256 KiB,
// average 1 MiB, max 4 MiB. Bytes a second version adds to a store holding
// the first, for seeded random data (so the same on every machine), as
// TestDedupCDCvsFixed and (opt-in) TestDedupFigures450 compute them:
//
//	450 MiB file, 37.5 MiB region rewritten in place: fixed 1 MiB 38.00 MiB (1.01x), CDC 38.32 MiB (1.02x)
//	450 MiB file, 4 KiB inserted at 1/3:              fixed 1 MiB 300.00 MiB,        CDC 0.85 MiB
//	 96 MiB file, 8 MiB region rewritten:             fixed 8.00 MiB (1.00x),        CDC 9.63 MiB (1.20x)
//	 96 MiB file, 4 KiB inserted:                     fixed 64.00 MiB,               CDC 1.18 MiB
//
// In-place edits cost both the same (the changed region plus its edge
// chunks); any shift (a tensor that grew, a re-serialised header, a
// re-ordered initializer list) makes fixed-size chunks re-store everything
// after it, CDC about one chunk. Through the store itself, TestFigures450
// checks that a second 450 MiB version with one twelfth rewritten adds at
// most 1.2x the changed bytes.
//
// # Operations and their guarantees
//
// Import keeps only what the bundle's manifest vouches for: every file in
// the directory must be listed in edgeinfer.json's "files" with its size
// and sha256, and every listed file must be there. Sizes are compared
// before anything is stored and digests while each file streams; a
// mismatch is ErrMismatch naming the file, the expected and the found
// value, nothing is published or activated, and the chunks the import had
// written are deleted again (TestImportRefusesBundleThatContradictsManifest
// compares versions, pointers, chunks and Verify before and after). An
// update agent can therefore feed the store without it ever holding a
// version that contradicts its own manifest.
//
// Import streams: one 4 MiB chunk buffer, chunks committed in transactions
// of at most Options.TxBytes (8 MiB), never a whole file in memory: importing
// 1 GiB grows VmRSS by less than 64 MB (TestImportMemory1GB, opt-in;
// TestImportMemoryBounded imports 128 MiB in every run). The
// version record is published in one final transaction, so no partial
// version is ever visible; chunks of an interrupted import are orphans
// (content-addressed, harmless) until GC, which is mark-and-sweep from the
// version records (no reference counts to drift after a crash) and excludes
// concurrent imports. Activate, Rollback and Remove are single transactions.
// bbolt's default fsync on commit is kept. TestCrashSafety SIGKILLs a child
// process looping import/activate/rollback/rm/gc at random points 50 times;
// after each kill the store opens, Verify passes, every visible version
// reads back byte-identical, and the version active before the kill loads.
//
// ReadFile assembles a file into one buffer, one copy out of bbolt's memory
// map, and re-hashes it before returning: each chunk against its SHA-256,
// in parallel. The chunk list is covered by the version record's checksum
// and was computed from the same bytes as the file digest, so this proves
// the whole file. A mismatch is ErrIntegrity naming model, version and file;
// other files and models still load. Export materialises a version as a
// directory (for ONNX Runtime models with external data next to
// model.onnx), each file hash-checked, synced and renamed into place.
//
// Verify re-hashes every chunk on all CPUs and names each model, version and
// file a bad or missing chunk or a damaged record hits, and each stored file
// that differs from its version's own manifest (a store written before
// Import checked may hold one).
//
// A full disk is ErrNoSpace (wrapping syscall.ENOSPC): the failed
// transaction rolls back, earlier versions read fine, and after GC frees the
// orphaned chunks imports work again (TestDiskFull, an 8 MiB tmpfs). A
// second process opening the file gets ErrLocked after Options.LockTimeout:
// "store: FILE is in use by another process (pid N?)", the pid read from
// /proc/locks.
//
// # Figures
//
// TestFigures450 (opt-in: EDGEINFER_STORE_BIG=1) measures on the machine at
// hand, for a 450 MiB random stand-in for synthetic-110m (or a real bundle:
// EDGEINFER_STORE_BUNDLE): import and verify MB/s (import is I/O bound, an
// fsync per transaction), the bytes-ready load of model.onnx through
// store.ReadFile against os.ReadFile of the same plain file, and what a
// second version with one twelfth rewritten adds. BenchmarkReadFile
// compares store.ReadFile with os.ReadFile on 64 MiB in every benchmark run.
//
// The ≤1.1x goal holds only for session-ready load, where ONNX Runtime's
// session creation dominates; the bytes-ready part costs one memory copy and
// a SHA-256 of every byte, which a plain os.ReadFile does not pay. Callers
// that need paths rather than bytes use Export once and load from disk.
//
// # Versions that arrive chunk by chunk
//
// An over-the-air update brings a version as chunks, not as a directory.
// Store.Stage returns a Stager: Missing lists the chunks of a file list the
// store lacks, PutChunk stores one after checking its SHA-256 (each its own
// durable transaction, so an interrupted transfer keeps what landed), and
// Publish re-hashes every file from its chunks, holds the files to the
// edgeinfer.json among them as Import does (ErrMismatch otherwise;
// TestStagedPublishRefusesFilesThatContradictManifest), and publishes the
// version without activating it — the caller activates after its health
// check.
// Split cuts a stream exactly as Import does, for publishers off the
// device; ReadChunk reads one chunk back, checked. While a Stager is open
// GC waits; staged chunks are orphans until Publish, so a GC after a
// restart may sweep them and Missing lists them again (TestStagePublish).
//
// # Other owners
//
// Store.Update(ctx, bucket, fn) and Store.View(ctx, bucket, fn) give fn a
// *Tx scoped to one top-level bucket (created on first Update): Get, Put,
// Delete, ForEach(start, fn), NextSequence, and Append, which stores a value
// under an 8-byte big-endian sequence key (SeqKey) — a durable journal or
// outbox whose sequence numbers never repeat. Names starting with "store."
// are refused. bbolt types never appear in the API.
//
// Open creates the file (and its directory) unless Options.MustExist is
// set: readers (the CLI's ls/verify/export, the engine opening a model by
// name) set it, so a mistyped path is ErrNoStore rather than a new, empty
// store in which every model looks missing.
//
// A Store is safe for concurrent use; one process at a time may open a file.
package store
