package llama

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// The float16 graph reads its pools widened to float32, exactly: fed
// float16 pools it must give what the fp32 graph gives on the same values
// as float32 pools, to rounding, in decode and in a prefill chunk (the
// kernel's gathered path). The fp32 side is the portable graph, the float16
// side both the kernel's and the portable one (a Cast after its Gather).
func TestKVFloat16MatchesWidenedPools(t *testing.T) {
	orttest.Need(t)
	c, src := tinyModel(t)
	const bs, blocks = DefaultBlockSize, 9
	hkv, hd := c.NumKeyValueHeads, c.HeadDim
	rng := rand.New(rand.NewPCG(7, 9))
	type layerPools struct {
		h    [2][]ort.Float16Bits
		wide [2][]float32
	}
	pools := make([]layerPools, c.NumHiddenLayers)
	for l := range pools {
		for kv := range 2 {
			h, wide := make([]ort.Float16Bits, hkv*blocks*bs*hd), make([]float32, hkv*blocks*bs*hd)
			for i := range h {
				h[i] = ort.Float16FromFloat32(float32(rng.NormFloat64()))
				wide[i] = h[i].Float32()
			}
			pools[l].h[kv], pools[l].wide[kv] = h, wide
		}
	}
	shape := []int64{int64(hkv), blocks, bs, int64(hd)}
	reducedPoolCases(t, c, src, Options{KVFloat16: true}, "float16 pools differ from the same values in float32 pools", func(r *runner, half bool) {
		for l, p := range pools {
			li := strconv.Itoa(l)
			for kv, kind := range []string{"key", "value"} {
				if half {
					set(r, kind+"_cache."+li, shape, p.h[kv])
				} else {
					set(r, kind+"_cache."+li, shape, p.wide[kv])
				}
			}
		}
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
