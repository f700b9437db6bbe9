package llm

import (
	"fmt"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// kvDType is the KV cache element type a bundle's graph reads: int8 pages
// or float16 pools when its geometry says so (kv_dtype "int8",
// "float16"), float32 otherwise.
func kvDType(g bundle.Geometry) kvcache.DType {
	switch {
	case g.KVInt8():
		return kvcache.Int8
	case g.KVFloat16():
		return kvcache.Float16
	}
	return kvcache.Float32
}

// poolTensorType is the tensor element type of each cache element type's
// pools.
var poolTensorType = map[kvcache.DType]ort.DType{kvcache.Float32: ort.Float32, kvcache.Float16: ort.Float16, kvcache.Int8: ort.Int8}

// checkPoolDType verifies a paged graph's KV pool input has the element
// type the manifest's kv_dtype promises, so a mismatched bundle fails at
// load rather than at its first step.
func (m *Model) checkPoolDType(name string, dt ort.DType) error {
	if !strings.HasPrefix(name, "key_cache.") && !strings.HasPrefix(name, "value_cache.") {
		return nil
	}
	if want := poolTensorType[kvDType(m.geom)]; dt != want {
		return fmt.Errorf("%w: %s input %s is %s, but the manifest's kv_dtype %q needs %s", ErrContract, m.b.ModelPath(), name, dt, m.geom.KVDType, want)
	}
	return nil
}

// wrapPools wraps the cache's per-layer pools once as tensors, zero copy
// (they live in the cache's anonymous mapping, outside the Go heap), by
// their bytes and the cache's element type: key_cache.l and value_cache.l
// at pools[2l] and pools[2l+1], and for int8 pages their scales
// key_scale.l and value_scale.l at scales[2l], [2l+1]. Scatter writes into
// the same memory, so the tensors always see the current cache.
func (m *Model) wrapPools() error {
	c := m.cache
	dt := poolTensorType[c.Config().DType]
	for l := range m.geom.Layers {
		for _, pool := range [][]byte{c.KeyPoolBytes(l), c.ValuePoolBytes(l)} {
			t, err := ort.WrapBytes(dt, c.PoolShape(), pool)
			if err != nil {
				return fmt.Errorf("llm: wrap kv pool: %w", err)
			}
			m.pools = append(m.pools, t)
		}
		if c.Config().DType != kvcache.Int8 {
			continue
		}
		for _, scales := range [][]float32{c.KeyScales(l), c.ValueScales(l)} {
			t, err := ort.NewTensor(c.ScaleShape(), scales)
			if err != nil {
				return fmt.Errorf("llm: wrap kv scales: %w", err)
			}
			m.scales = append(m.scales, t)
		}
	}
	return nil
}
