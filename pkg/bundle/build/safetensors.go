package build

import (
	"errors"
	"fmt"
	"slices"

	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/pkg/safetensors"
)

// ErrSafetensors reports an unreadable or malformed safetensors file; the
// wrapped pkg/safetensors error (safetensors.ErrHeader, ErrIndex, …) says
// what was wrong.
var ErrSafetensors = errors.New("bundle: invalid safetensors")

// SafetensorsSource is a llama.WeightSource over a checkpoint's
// safetensors files, single or sharded, read through pkg/safetensors: the
// files are mapped and their headers validated when opened, and each Tensor
// call converts one tensor (F32, F16 or BF16) to float32, so the heap holds
// one tensor at a time. Safe for concurrent use; Close is idempotent.
type SafetensorsSource struct {
	ckpt *safetensors.Checkpoint
}

// OpenSafetensors opens the shards listed in dir/model.safetensors.index.json,
// or else dir/model.safetensors, or else every *.safetensors file in dir.
func OpenSafetensors(dir string) (*SafetensorsSource, error) {
	c, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSafetensors, err)
	}
	return &SafetensorsSource{ckpt: c}, nil
}

// Names lists the tensors, sorted.
func (s *SafetensorsSource) Names() []string {
	names := s.ckpt.Names()
	slices.Sort(names)
	return names
}

// Tensor returns the named tensor as float32; a name the checkpoint lacks
// wraps llama.ErrMissingTensor.
func (s *SafetensorsSource) Tensor(name string) (llama.Tensor, error) {
	t, err := s.ckpt.Tensor(name)
	if errors.Is(err, safetensors.ErrNotFound) {
		return llama.Tensor{}, fmt.Errorf("%w: %s", llama.ErrMissingTensor, name)
	}
	if err != nil {
		return llama.Tensor{}, fmt.Errorf("%w: %w", ErrSafetensors, err)
	}
	data, err := t.Float32s()
	if err != nil {
		return llama.Tensor{}, fmt.Errorf("%w: tensor %s: %w", ErrSafetensors, name, err)
	}
	return llama.Tensor{Shape: slices.Clone(t.Shape), Data: data}, nil
}

// Close unmaps the files.
func (s *SafetensorsSource) Close() error { return s.ckpt.Close() }
