package guest

import (
	"fmt"
	"strconv"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// Arg returns the string argument key (the tensor "arg.<key>" that the
// host fills from the bundle manifest's args), or def when absent.
func Arg(in []abi.Tensor, key, def string) string {
	if t, ok := abi.Find(in, "arg."+key); ok {
		if s, err := t.Text(); err == nil {
			return s
		}
	}
	return def
}

// ArgFloat is Arg parsed as a number; a value that does not parse is an
// error naming the argument.
func ArgFloat(in []abi.Tensor, key string, def float64) (float64, error) {
	s := Arg(in, key, "")
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("argument %s=%q: want a number", key, s)
	}
	return v, nil
}

// Input returns the tensor called name, or an error saying what the
// plugin needs.
func Input(in []abi.Tensor, name string, dt abi.DType) (abi.Tensor, error) {
	t, ok := abi.Find(in, name)
	if !ok {
		have := make([]string, len(in))
		for i, x := range in {
			have[i] = x.String()
		}
		return abi.Tensor{}, fmt.Errorf("no input %q (%s); got %v", name, dt, have)
	}
	if t.DType != dt {
		return abi.Tensor{}, fmt.Errorf("input %q is %s, want %s", name, t.DType, dt)
	}
	return t, nil
}
