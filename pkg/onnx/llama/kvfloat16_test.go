package llama

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// The float16 graph reads its pools widened to float32, exactly: fed
// float16 pools it must give what the fp32 graph gives on the same values
// as float32 pools, to rounding, in decode and in a prefill chunk (the
// kernel's gathered path). The fp32 side is the portable graph, the float16
// side both the kernel's and the portable one (a Cast after its Gather).
func TestKVFloat16MatchesWidenedPools(t *testing.T) {
	reducedPoolCases(t, Options{KVFloat16: true}, "float16 pools differ from the same values in float32 pools", func(rng *rand.Rand, shape []int64) reducedPool {
		n := int(shape[0] * shape[1] * shape[2] * shape[3])
		h, wide := make([]ort.Float16Bits, n), make([]float32, n)
		for i := range h {
			h[i] = ort.Float16FromFloat32(float32(rng.NormFloat64()))
			wide[i] = h[i].Float32()
		}
		return reducedPool{wide: wide, set: func(r *runner, kind, li string) { set(r, kind+"_cache."+li, shape, h) }}
	})
}

func TestKVFloat16Options(t *testing.T) {
	c, src := tinyModel(t)
	for name, o := range map[string]Options{
		"compatible contract": {Contract: ContractCompatible, KVFloat16: true},
		"and int8":            {KVFloat16: true, KVInt8: true},
	} {
		if err := Build(onnx.NewBuilder("t"), c, src, o); !errors.Is(err, ErrOptions) {
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
	}
}
