package bundle

import "errors"

var (
	// ErrManifest reports a manifest that cannot be parsed or fails
	// validation.
	ErrManifest = errors.New("bundle: invalid manifest")
	// ErrChecksum reports a bundle file whose size or sha256 differs from
	// the manifest; the error names the file.
	ErrChecksum = errors.New("bundle: checksum mismatch")
	// ErrMissingFile reports a file the manifest lists but the bundle
	// lacks.
	ErrMissingFile = errors.New("bundle: missing file")
	// ErrUnrecognised reports a directory Recognise cannot make a bundle of.
	ErrUnrecognised = errors.New("bundle: unrecognised model")
)
