package quant

import "errors"

// Sentinel errors; wrap them with %w and the operation.
var (
	// ErrScheme reports an unknown or invalid quantisation scheme.
	ErrScheme = errors.New("quant: invalid scheme")
	// ErrNothingToQuantize reports a graph with no weight the scheme can
	// quantise; the CLI treats it as a clear no-op.
	ErrNothingToQuantize = errors.New("quant: no quantisable weights")
	// ErrDType reports a weight of an element type the quantiser cannot read.
	ErrDType = errors.New("quant: unsupported weight dtype")
	// ErrBlockSize reports an inner dimension K that is not a multiple of the
	// block size while padding is off.
	ErrBlockSize = errors.New("quant: K not divisible by block size")
	// ErrShape reports a tensor whose shape does not fit the operation.
	ErrShape = errors.New("quant: bad tensor shape")
	// ErrModel reports a malformed model (missing external data, bad graph).
	ErrModel = errors.New("quant: invalid model")
	// ErrCalibration reports a calibration set that does not fit the model.
	ErrCalibration = errors.New("quant: bad calibration set")
)
