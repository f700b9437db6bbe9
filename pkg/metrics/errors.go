package metrics

import "errors"

// Sentinel errors of the package; wrap them with %w and the operation.
var (
	// ErrMergeMismatch is returned when merging histograms built with
	// different relative accuracies.
	ErrMergeMismatch = errors.New("metrics: histograms have different accuracy")
)
