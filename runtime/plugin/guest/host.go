package guest

import (
	"errors"
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// Host runs the host primitive called name (package
// runtime/plugin/primitive lists them: "image.prepare", "nms.weighted",
// "argmax.rows", "db.boxes") on in and returns its output tensors, which
// are valid until the request ends, as its inputs are (copy what must
// outlive it). The primitive runs natively on the host, bounded by the
// plugin's memory cap and the call's deadline; an input it refuses comes
// back as an error naming the primitive. Outside wasip1 it runs the
// primitive in-process, so a handler tested natively takes the same path.
func Host(name string, in []abi.Tensor) ([]abi.Tensor, error) {
	if err := abi.Validate(in); err != nil {
		return nil, fmt.Errorf("host primitive %s: input: %w", name, err)
	}
	resp := hostCall(name, in)
	out, err := abi.Decode(resp)
	if ge, ok := errors.AsType[*abi.GuestError](err); ok {
		return nil, errors.New(ge.Msg)
	}
	if err != nil {
		return nil, fmt.Errorf("host primitive %s: response: %w", name, err)
	}
	return out, nil
}

// Read returns t with its data: a held tensor (HoldLarge) is copied into
// the module, once per call of Read, into a buffer valid until the request
// ends; any other tensor is returned as it is.
func Read(t abi.Tensor) (abi.Tensor, error) {
	if !t.Held() {
		return t, nil
	}
	b, err := readHeld(t)
	if err != nil {
		return abi.Tensor{}, err
	}
	t.Data, t.Handle = b, 0
	return t, nil
}
