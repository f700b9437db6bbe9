package platforms

import "errors"

// Sentinel errors of the package; wrap them with %w and the operation.
var (
	// ErrUnknownProfile means DetectOptions.Board names no profile.
	ErrUnknownProfile = errors.New("platforms: unknown board profile")
	// ErrParse means a system file could not be parsed; detection turns it
	// into a warning, the parsers return it.
	ErrParse = errors.New("platforms: malformed system file")
	// ErrNotELF means a file given as a shared library or binary is not ELF.
	ErrNotELF = errors.New("platforms: not an ELF file")
)
