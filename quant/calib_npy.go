package quant

import "github.com/edgeinfer/edgeinfer/pkg/npy"

// loadNpyFile reads a float32 calibration tensor (pkg/npy is the SDK's one
// .npy reader).
func loadNpyFile(path string) (Tensor, error) {
	a, err := npy.ReadFile(path)
	if err != nil {
		return Tensor{}, err
	}
	data, err := a.Float32()
	if err != nil {
		return Tensor{}, err
	}
	return Tensor{Shape: a.Shape, Data: data}, nil
}
