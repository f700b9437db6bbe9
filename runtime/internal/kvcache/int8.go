package kvcache

import "math"

// minScaleGrowth is the least factor by which a block's int8 scale grows
// when a row outgrows it. Each requantisation adds up to half a step of
// the new scale to the rows already stored; growing by at least 1.5× makes
// those errors a geometric series, so no value is ever off by more than
// 1.5 steps of its block's final scale, however many times the block was
// requantised. Measured on gaussian rows (head dim 64, block 16) the
// relative RMS error is 1.00–1.23 % against 0.98–1.16 % for exact growth,
// whose worst case reached 2.2 steps.
const minScaleGrowth = 1.5

// quantiseRow writes one token's head row into an int8 pool. Each
// (block, head) has one scale, and a block fills a token at a time. When a
// new row's max|x| exceeds what the scale covers (127 steps), the scale
// grows to max(max|x|/127, 1.5 × old) and the block's stored rows are
// requantised to it: 16 rows × headDim int8 at the default block size,
// cheaper than keeping float copies. So scales only grow, every stored
// value stays within ±127, and no value errs by more than 1.5 steps of its
// block's final scale (half a step if the block was never requantised).
func (c *Cache) quantiseRow(pool []int8, scales []float32, head int, slot int64, row []float32) {
	bs := int64(c.bs)
	block := int(slot / bs)
	si := head*c.numBlocks + block
	amax := absMax(row)
	scale := scales[si]
	// Compare amax/127 (not scale*127) so that a row equal to the one
	// that set the scale does not trip over a rounding ulp.
	if need := amax / 127; need > scale {
		ns := max(need, scale*minScaleGrowth)
		if scale > 0 {
			base := head*c.headStride + block*c.blockElems
			requantise(pool[base:base+c.blockElems], scale/ns)
		}
		scales[si] = ns
		scale = ns
	}
	dst := pool[head*c.headStride+int(slot)*c.cfg.HeadDim:][:len(row)]
	if scale == 0 {
		clear(dst)
		return
	}
	inv := 1 / scale
	for i, x := range row {
		dst[i] = roundInt8(x * inv)
	}
}

// absMax is max|x| over row, ignoring NaNs and clamping infinities to
// MaxFloat32. It compares the IEEE bits with the sign cleared as integers
// (their order is the order of the magnitudes), which compiles to
// branch-free code; the rare row holding a NaN or an infinity takes a
// careful second pass.
func absMax(row []float32) float32 {
	var m0, m1, m2, m3 uint32 // four chains for instruction-level parallelism
	i := 0
	for ; i+4 <= len(row); i += 4 {
		r := row[i : i+4 : i+4]
		m0 = max(m0, math.Float32bits(r[0])&^(1<<31))
		m1 = max(m1, math.Float32bits(r[1])&^(1<<31))
		m2 = max(m2, math.Float32bits(r[2])&^(1<<31))
		m3 = max(m3, math.Float32bits(r[3])&^(1<<31))
	}
	for ; i < len(row); i++ {
		m0 = max(m0, math.Float32bits(row[i])&^(1<<31))
	}
	m := max(m0, m1, m2, m3)
	const inf = 0x7f800000
	if m < inf {
		return math.Float32frombits(m)
	}
	amax := float32(0)
	for _, x := range row {
		if a := abs32(x); a > amax && a <= math.MaxFloat32 {
			amax = a
		} else if a > math.MaxFloat32 && a == a {
			amax = math.MaxFloat32
		}
	}
	return amax
}

// requantise rescales int8 values by f (< 1), rounding to nearest.
func requantise(q []int8, f float32) {
	for i, x := range q {
		if x != 0 {
			q[i] = roundInt8(float32(x) * f)
		}
	}
}

// roundInt8 rounds x to the nearest int8 in [-127, 127], half to even,
// without branches on the sign: adding and subtracting 1.5·2²³ leaves x
// rounded in float32 arithmetic. A NaN (the only input that fails both
// clamps) converts to an implementation-defined value, which is still a
// finite int8.
func roundInt8(x float32) int8 {
	const magic = 12582912 // 1.5 * 2^23
	if x > 127 {
		x = 127
	} else if x < -127 {
		x = -127
	}
	return int8(int32((x + magic) - magic))
}

func abs32(x float32) float32 {
	return math.Float32frombits(math.Float32bits(x) &^ (1 << 31))
}

// Dequantise writes the float32 keys (or values, per the pool and scales
// passed) of head and slot of an int8 layer into dst, as the decoder graph
// computes them after its gather: q × scale[head, block]. For tests and
// for adapters that need a float past.
func (c *Cache) Dequantise(dst []float32, pool []int8, scales []float32, head int, slot int64) {
	scale := scales[head*c.numBlocks+int(slot/int64(c.bs))]
	src := pool[head*c.headStride+int(slot)*c.cfg.HeadDim:][:len(dst)]
	for i, q := range src {
		dst[i] = float32(q) * scale
	}
}
