package ort

import (
	"errors"
	"testing"
)

// TestWrapBytes: raw bytes wrapped with a run-time element type are the
// tensor's memory (a write through the bytes shows in the tensor), and a
// wrong length or misaligned start is refused.
func TestWrapBytes(t *testing.T) {
	needLib(t)
	raw := make([]byte, 2*3*2+4) // room for a misaligned view
	x, err := WrapBytes(Float16, []int64{2, 3}, raw[:12])
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	h := Float16FromFloat32(1.5)
	raw[10], raw[11] = byte(h), byte(h>>8) // element [1, 2], little-endian
	d, err := Data[Float16Bits](x)
	if err != nil {
		t.Fatal(err)
	}
	if d[5] != h || x.DType() != Float16 {
		t.Errorf("element 5 reads %#x (%s tensor), want %#x written through the bytes", d[5], x.DType(), h)
	}
	for name, err := range map[string]error{
		"short":      func() error { _, err := WrapBytes(Float16, []int64{2, 3}, raw[:10]); return err }(),
		"misaligned": func() error { _, err := WrapBytes(Float32, []int64{2}, raw[1:9]); return err }(),
		"no size":    func() error { _, err := WrapBytes(String, []int64{1}, raw[:8]); return err }(),
	} {
		if !errors.Is(err, ErrInvalidTensor) {
			t.Errorf("%s: err = %v, want ErrInvalidTensor", name, err)
		}
	}
}
