//go:build !wasip1

package guest

import (
	"context"
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/primitive"
)

// hostCall runs the primitive in-process; its response is encoded as the
// host's is, so that Host decodes both alike.
func hostCall(name string, in []abi.Tensor) []byte {
	out, err := primitive.Run(context.Background(), name, in, primitive.Limits{})
	if err != nil {
		return abi.EncodeError(nil, err.Error())
	}
	return abi.Encode(nil, out)
}

func resetHost() {}

// readHeld: outside the sandbox no host holds anything.
func readHeld(t abi.Tensor) ([]byte, error) {
	return nil, fmt.Errorf("held tensor %v: held data exists only inside the sandbox", t)
}
