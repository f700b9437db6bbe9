package safetensors

import "errors"

var (
	// ErrHeader reports a malformed file: bad header length, invalid JSON, an
	// unknown dtype, or a tensor whose shape and byte range disagree, lie
	// outside the data or overlap another. The wrapping error names the tensor.
	ErrHeader = errors.New("safetensors: invalid header")
	// ErrNotFound reports a tensor name the file or checkpoint does not hold,
	// or a directory without safetensors files.
	ErrNotFound = errors.New("safetensors: not found")
	// ErrDType reports a conversion the tensor's dtype does not allow.
	ErrDType = errors.New("safetensors: unsupported dtype")
	// ErrAlignment reports a zero-copy view whose data is not aligned for
	// its element type (the header length is not a multiple of 8).
	ErrAlignment = errors.New("safetensors: misaligned data")
	// ErrIndex reports a malformed model.safetensors.index.json or a shard
	// that does not hold what the index says.
	ErrIndex = errors.New("safetensors: invalid index")
	// ErrClosed reports use of a File or Checkpoint after Close.
	ErrClosed = errors.New("safetensors: closed")
	// ErrInvalid reports a tensor Write cannot encode (bad name, shape or size).
	ErrInvalid = errors.New("safetensors: invalid tensor")
)
