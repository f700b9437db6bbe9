package platforms

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// QNNQualifies says whether a model can run on Qualcomm's HTP through the
// QNN provider, and if not, every reason: the HTP compiles a graph once for
// fixed shapes and computes in integers, so it takes models whose inputs are
// all fixed-size and that carry QDQ (QuantizeLinear/DequantizeLinear) int8
// or int16 quantisation, as `edgeinfer quantize --scheme qdq-int8` writes
// them. Decoders (symbolic batch and sequence, ai.edgeinfer operators) and
// weight-only int4 models (MatMulNBits) do not qualify.
func QNNQualifies(model []byte) (bool, []string, error) {
	r, err := onnx.Inspect(model)
	if err != nil {
		return false, nil, fmt.Errorf("platforms: qnn check: %w", err)
	}
	var why []string
	for _, in := range r.Inputs {
		for i, d := range in.Shape {
			if _, err := strconv.ParseInt(d, 10, 64); err != nil {
				why = append(why, fmt.Sprintf("input %s dimension %d is %q, not fixed (export with static shapes)", in.Name, i, d))
			}
		}
	}
	if r.Ops["QuantizeLinear"]+r.Ops["DequantizeLinear"]+r.Ops["com.microsoft.QuantizeLinear"]+r.Ops["com.microsoft.DequantizeLinear"] == 0 {
		why = append(why, "no QuantizeLinear/DequantizeLinear nodes: not QDQ-quantised (edgeinfer quantize --scheme qdq-int8 --calibrate DIR --reduce-range=false)")
	}
	for op := range r.Ops {
		switch {
		case strings.HasPrefix(op, "ai.edgeinfer."):
			why = append(why, "uses "+op+", a CPU kernel of this SDK that QNN cannot take")
		case op == "com.microsoft.MatMulNBits":
			why = append(why, "uses com.microsoft.MatMulNBits (weight-only int4): the HTP takes QDQ int8/int16")
		}
	}
	return len(why) == 0, why, nil
}
