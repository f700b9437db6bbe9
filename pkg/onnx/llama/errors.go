package llama

import "errors"

var (
	// ErrConfig reports a config.json that cannot be parsed or describes an
	// impossible model (zero sizes, heads not divisible by KV heads, …).
	ErrConfig = errors.New("llama: invalid config")
	// ErrArchitecture reports a model architecture this builder does not
	// implement.
	ErrArchitecture = errors.New("llama: unsupported architecture")
	// ErrMissingTensor reports a weight the config requires but the source
	// lacks; the error names the tensor.
	ErrMissingTensor = errors.New("llama: missing tensor")
	// ErrTensorShape reports a weight whose shape differs from the config's;
	// the error names the tensor and both shapes.
	ErrTensorShape = errors.New("llama: tensor shape mismatch")
	// ErrOptions reports invalid build options.
	ErrOptions = errors.New("llama: invalid build options")
)
