//go:build !wasip1

package guest

import (
	"context"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/primitive"
)

// hostCall runs the primitive in-process, through the same encoding.
func hostCall(name string, in []abi.Tensor) []byte {
	in, err := abi.Decode(abi.Encode(nil, in))
	var out []abi.Tensor
	if err == nil {
		out, err = primitive.Run(context.Background(), name, in, primitive.Limits{})
	}
	if err != nil {
		return abi.EncodeError(nil, err.Error())
	}
	return abi.Encode(nil, out)
}

func resetHost() {}
