// Package fleet is the release side of over-the-air updates: the TUF
// repositories a fleet publishes to devices (package update verifies
// them), laid out as static files any HTTPS host can serve.
//
// Init creates the image repository (and with InitOptions.Director the
// director repository of Uptane's split) with ed25519 keys per role and
// thresholds; root keys can live in a directory of their own, kept
// offline: only RotateRoot needs them. Publish cuts a bundle's files into
// the store's chunks — ONNX external data first at tensor starts, so a
// changed tensor is new chunks exactly — writes those not already under
// chunks/ (an unchanged layer is stored once), and signs a new targets,
// snapshot and timestamp, written in that order, each atomically, so a
// device reading meanwhile sees the old set or the new. RefreshTimestamp
// is the online job that keeps the timestamp from expiring; Assign writes
// the director's per-device assignment; Withdraw removes a release.
//
// A Repository is not safe for concurrent use, but any number of
// processes may change one directory (fleet serve's leader re-signing
// timestamps and assignments while an operator publishes): each change
// holds the directory's flock and reads the metadata again before
// signing. The repository is the state: another instance that opens the
// directory with the keys can carry on.
package fleet
