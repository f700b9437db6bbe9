package kvcache

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/pkg/f16"
)

// Scatter writes a step's new keys and values into their pool slots for
// every layer. newKeys[l] and newValues[l] are the graph outputs
// new_keys.{l} / new_values.{l}, row-major [batch, kvHeads, steps, headDim];
// slots is row-major [batch, steps] as made by Sequence.Slots, with a
// negative slot for each padding position (skipped). A float16 cache
// rounds each value to nearest, ties to even. An int8 cache
// quantises on the way in, one scale per (block, head), growing it and
// requantising the block's rows when a new row exceeds it. Nothing is
// written unless every argument is valid. Scatter allocates nothing.
func (c *Cache) Scatter(newKeys, newValues [][]float32, batch, steps int, slots []int64) error {
	if err := c.checkScatter(newKeys, newValues, batch, steps, slots); err != nil {
		return err
	}
	for l := range c.cfg.Layers {
		c.scatterLayer(l, newKeys[l], newValues[l], batch, steps, slots)
	}
	return nil
}

// ScatterLayer is Scatter for one layer (for executors that run layers
// as separate graphs).
func (c *Cache) ScatterLayer(layer int, newKeys, newValues []float32, batch, steps int, slots []int64) error {
	if layer < 0 || layer >= c.cfg.Layers {
		return fmt.Errorf("%w: scatter layer %d of %d", ErrInvalidArgument, layer, c.cfg.Layers)
	}
	k, v := [][]float32{newKeys}, [][]float32{newValues}
	if err := c.checkScatterN(1, k, v, batch, steps, slots); err != nil {
		return err
	}
	c.scatterLayer(layer, newKeys, newValues, batch, steps, slots)
	return nil
}

func (c *Cache) checkScatter(k, v [][]float32, batch, steps int, slots []int64) error {
	return c.checkScatterN(c.cfg.Layers, k, v, batch, steps, slots)
}

func (c *Cache) checkScatterN(layers int, k, v [][]float32, batch, steps int, slots []int64) error {
	if err := c.checkOpen("scatter"); err != nil {
		return err
	}
	if batch < 0 || steps < 0 || len(slots) != batch*steps {
		return fmt.Errorf("%w: scatter %d slots for batch %d × steps %d", ErrInvalidArgument, len(slots), batch, steps)
	}
	if len(k) != layers || len(v) != layers {
		return fmt.Errorf("%w: scatter %d key and %d value layers, want %d", ErrInvalidArgument, len(k), len(v), layers)
	}
	want := batch * c.cfg.KVHeads * steps * c.cfg.HeadDim
	for l := range k {
		if len(k[l]) != want || len(v[l]) != want {
			return fmt.Errorf("%w: scatter layer %d: %d keys and %d values, want %d", ErrInvalidArgument, l, len(k[l]), len(v[l]), want)
		}
	}
	limit := int64(c.numBlocks) * int64(c.bs)
	for _, s := range slots {
		if s >= limit {
			return fmt.Errorf("%w: scatter slot %d beyond %d", ErrInvalidArgument, s, limit)
		}
	}
	return nil
}

func (c *Cache) scatterLayer(l int, k, v []float32, batch, steps int, slots []int64) {
	hd, heads := c.cfg.HeadDim, c.cfg.KVHeads
	if c.cfg.DType == Int8 {
		kq, vq, ks, vs := c.mem.keyI8[l], c.mem.valueI8[l], c.mem.keyScale[l], c.mem.valueScale[l]
		for b := range batch {
			for t := range steps {
				if slot := slots[b*steps+t]; slot >= 0 {
					for h := range heads {
						src := ((b*heads+h)*steps + t) * hd
						c.quantiseRow(kq, ks, h, slot, k[src:src+hd])
						c.quantiseRow(vq, vs, h, slot, v[src:src+hd])
					}
				}
			}
		}
		return
	}
	if c.cfg.DType == Float16 {
		scatterRows(c, c.mem.keyF16[l], c.mem.valueF16[l], k, v, batch, steps, slots, f16.Narrow)
		return
	}
	scatterRows(c, c.mem.keyF32[l], c.mem.valueF32[l], k, v, batch, steps, slots, func(dst, src []float32) { copy(dst, src) })
}

// scatterRows puts each (row, step, head)'s keys and values into its slot
// of one layer's pools kp and vp, as put converts them.
func scatterRows[T uint16 | float32](c *Cache, kp, vp []T, k, v []float32, batch, steps int, slots []int64, put func(dst []T, src []float32)) {
	hd, heads := c.cfg.HeadDim, c.cfg.KVHeads
	for b := range batch {
		for t := range steps {
			if slot := slots[b*steps+t]; slot >= 0 {
				for h := range heads {
					src := ((b*heads+h)*steps + t) * hd
					dst := h*c.headStride + int(slot)*hd
					put(kp[dst:dst+hd], k[src:src+hd])
					put(vp[dst:dst+hd], v[src:src+hd])
				}
			}
		}
	}
}
