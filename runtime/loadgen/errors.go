package loadgen

import "errors"

// Sentinel errors of the package; errors returned by it wrap one of these
// with %w and the operation.
var (
	// ErrSpec reports an invalid workload spec; the message names the
	// field, e.g. "loadgen: invalid spec: phases[2].arrival.rate: must be > 0".
	ErrSpec = errors.New("loadgen: invalid spec")
	// ErrModel reports a spec model the engine did not open, or an engine
	// with no decoder.
	ErrModel = errors.New("loadgen: no such model")
	// ErrCorpus reports a prompt corpus that cannot be used.
	ErrCorpus = errors.New("loadgen: unusable corpus")
	// ErrTrace reports a malformed arrival trace file.
	ErrTrace = errors.New("loadgen: malformed trace")
	// ErrNoRequests reports a run in which no request finished at all.
	ErrNoRequests = errors.New("loadgen: no request finished")
)

// ErrTarget reports a --target server that cannot be used: a bad URL, no
// answer, or no OpenAI model list.
var ErrTarget = errors.New("loadgen: target server")
