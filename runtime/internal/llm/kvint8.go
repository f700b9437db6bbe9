package llm

import (
	"fmt"
	"strings"
	"unsafe"

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

// checkPoolDType verifies a paged graph's KV pool input has the element
// type the manifest's kv_dtype promises, so a mismatched bundle fails at
// load rather than at its first step.
func (m *Model) checkPoolDType(name string, dt ort.DType) error {
	if !strings.HasPrefix(name, "key_cache.") && !strings.HasPrefix(name, "value_cache.") {
		return nil
	}
	want := ort.Float32
	switch {
	case m.geom.KVInt8():
		want = ort.Int8
	case m.geom.KVFloat16():
		want = ort.Float16
	}
	if dt != want {
		return fmt.Errorf("%w: %s input %s is %s, but the manifest's kv_dtype %q needs %s", ErrContract, m.b.ModelPath(), name, dt, m.geom.KVDType, want)
	}
	return nil
}

// wrapPools wraps the cache's per-layer pools once as tensors, zero copy
// (they live in the cache's anonymous mapping, outside the Go heap):
// key_cache.l and value_cache.l at pools[2l] and pools[2l+1] (float32,
// float16 or int8 as the cache holds them), and for int8
// pages their scales key_scale.l and value_scale.l at scales[2l], [2l+1].
// Scatter quantises into the same memory, so the tensors always see the
// current cache.
func (m *Model) wrapPools() error {
	c := m.cache
	shape := c.PoolShape()
	for l := range m.geom.Layers {
		if c.Config().DType == kvcache.Int8 {
			for _, pool := range [][]int8{c.KeyPoolInt8(l), c.ValuePoolInt8(l)} {
				if err := wrapInto(&m.pools, shape, pool); err != nil {
					return err
				}
			}
			for _, scales := range [][]float32{c.KeyScales(l), c.ValueScales(l)} {
				if err := wrapInto(&m.scales, c.ScaleShape(), scales); err != nil {
					return err
				}
			}
			continue
		}
		if c.Config().DType == kvcache.Float16 {
			for _, pool := range [][]uint16{c.KeyPoolFloat16(l), c.ValuePoolFloat16(l)} {
				// the same bits, typed as the tensor's element
				h := unsafe.Slice((*ort.Float16Bits)(unsafe.Pointer(unsafe.SliceData(pool))), len(pool))
				if err := wrapInto(&m.pools, shape, h); err != nil {
					return err
				}
			}
			continue
		}
		for _, pool := range [][]float32{c.KeyPool(l), c.ValuePool(l)} {
			if err := wrapInto(&m.pools, shape, pool); err != nil {
				return err
			}
		}
	}
	return nil
}

// wrapInto appends a zero-copy tensor over data to *dst.
func wrapInto[T int8 | float32 | ort.Float16Bits](dst *[]*ort.Tensor, shape []int64, data []T) error {
	t, err := ort.NewTensor(shape, data)
	if err != nil {
		return fmt.Errorf("llm: wrap kv pool: %w", err)
	}
	*dst = append(*dst, t)
	return nil
}
