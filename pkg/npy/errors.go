package npy

import "errors"

// ErrFormat: the bytes are not a .npy file this package reads; the error
// says what was wrong (magic, version, header, dtype, order, shape, data
// length).
var ErrFormat = errors.New("npy: unsupported or malformed file")
