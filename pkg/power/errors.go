package power

import "errors"

// Sentinel errors of the package; wrap them with %w and the operation.
var (
	// ErrNoSensor means no usable power or energy source was found.
	ErrNoSensor = errors.New("power: no power sensor")
	// ErrUnavailable means a source cannot give a valid reading now
	// (a battery that is charging, a stale smart-plug message).
	ErrUnavailable = errors.New("power: reading unavailable")
	// ErrParse means a sensor file or plug payload could not be parsed.
	ErrParse = errors.New("power: malformed reading")
	// ErrClosed is returned by operations on a closed Sampler.
	ErrClosed = errors.New("power: sampler closed")
	// ErrStarted is returned when a Sampler is started twice.
	ErrStarted = errors.New("power: sampler already started")
	// ErrNotBuilt is returned by NVML probing in a build without the
	// "nvml" tag.
	ErrNotBuilt = errors.New("power: not built with nvml (build tag nvml)")
)
