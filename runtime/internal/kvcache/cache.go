package kvcache

import (
	"errors"
	"fmt"
)

// Cache is a paged key/value cache: a fixed pool of blocks of BlockSize
// token slots per layer, handed to Sequences as they grow, shared between
// sequences by prefix and by Fork, and recycled in LRU order.
//
// A Cache is NOT safe for concurrent use: one goroutine (the scheduler's)
// owns it and every Sequence made from it, and makes every call except
// Stats. Stats may be called from any goroutine at any time, also during
// and after Close. Single ownership keeps the per-token paths free of
// locks; the scheduler already serialises steps on one device.
type Cache struct {
	cfg        Config
	numBlocks  int
	bs         int // tokens per block
	headStride int // elements between consecutive heads of one pool
	blockElems int // elements of one (head, block): bs * headDim
	mem        *pools
	closed     bool

	blocks blockTable // refcounts, free list, LRU
	prefix prefixIndex
	nextID uint64
	live   map[*Sequence]struct{}

	// persisted is the file blocks are restored from (persist.go), or nil;
	// prefixVersion counts blocks entered into the prefix index.
	persisted     *Persisted
	prefixVersion uint64
	// reusedVersion counts blocks reused for the first time (markReused).
	reusedVersion uint64

	stats counters
}

// New maps the pools for cfg and returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := cfg.NumBlocks()
	mem, err := newPools(cfg, n)
	if err != nil {
		return nil, err
	}
	c := &Cache{
		cfg:        cfg,
		numBlocks:  n,
		bs:         cfg.BlockSize,
		headStride: n * cfg.BlockSize * cfg.HeadDim,
		blockElems: cfg.BlockSize * cfg.HeadDim,
		mem:        mem,
		live:       make(map[*Sequence]struct{}),
	}
	c.blocks.init(n, cfg.BlockSize)
	c.prefix.init(n, cfg.BlockSize)
	c.stats.total.Store(int64(n))
	c.stats.blockSize.Store(int64(cfg.BlockSize))
	c.stats.blockBytes.Store(cfg.BlockBytes())
	return c, nil
}

// Close unmaps the pools. Tensors wrapping them must be released first.
// Sequences become unusable (ErrClosed). Close is idempotent.
func (c *Cache) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	for s := range c.live {
		s.freed = true
	}
	clear(c.live)
	c.stats.sequences.Store(0)
	var perr error
	if c.persisted != nil {
		perr = c.persisted.Close()
		c.persisted = nil
	}
	return errors.Join(c.mem.unmap(), perr)
}

// Config returns the configuration the cache was built from.
func (c *Cache) Config() Config { return c.cfg }

// NumBlocks is the number of blocks in each pool.
func (c *Cache) NumBlocks() int { return c.numBlocks }

// BlockSize is the number of token slots per block.
func (c *Cache) BlockSize() int { return c.bs }

// PoolShape is the shape of every key and value pool:
// [kvHeads, numBlocks, blockSize, headDim].
func (c *Cache) PoolShape() []int64 {
	return []int64{int64(c.cfg.KVHeads), int64(c.numBlocks), int64(c.bs), int64(c.cfg.HeadDim)}
}

// ScaleShape is the shape of every int8 scale pool: [kvHeads, numBlocks].
func (c *Cache) ScaleShape() []int64 {
	return []int64{int64(c.cfg.KVHeads), int64(c.numBlocks)}
}

// KeyPool and ValuePool return layer's float32 pool, or nil for an int8
// cache, a bad layer or a closed cache. The slice aliases the mapping: wrap
// it once as a tensor of PoolShape; it stays valid until Close.
func (c *Cache) KeyPool(layer int) []float32 { return pick(c.mem.keyF32, layer) }

// ValuePool: see KeyPool.
func (c *Cache) ValuePool(layer int) []float32 { return pick(c.mem.valueF32, layer) }

// KeyPoolInt8 and ValuePoolInt8 return layer's int8 pool, or nil for a
// float32 cache, a bad layer or a closed cache.
func (c *Cache) KeyPoolInt8(layer int) []int8 { return pick(c.mem.keyI8, layer) }

// ValuePoolInt8: see KeyPoolInt8.
func (c *Cache) ValuePoolInt8(layer int) []int8 { return pick(c.mem.valueI8, layer) }

// KeyPoolFloat16 and ValuePoolFloat16 return layer's float16 pool (IEEE
// binary16 bits), or nil for another element type, a bad layer or a
// closed cache.
func (c *Cache) KeyPoolFloat16(layer int) []uint16 { return pick(c.mem.keyF16, layer) }

// ValuePoolFloat16: see KeyPoolFloat16.
func (c *Cache) ValuePoolFloat16(layer int) []uint16 { return pick(c.mem.valueF16, layer) }

// KeyPoolBytes and ValuePoolBytes return layer's pool as raw bytes
// whatever the element type (for wrapping by element type at run time).
func (c *Cache) KeyPoolBytes(layer int) []byte { return pick(c.mem.keyBytes, layer) }

// ValuePoolBytes: see KeyPoolBytes.
func (c *Cache) ValuePoolBytes(layer int) []byte { return pick(c.mem.valueBytes, layer) }

// KeyScales and ValueScales return layer's int8 dequantisation scales,
// shaped ScaleShape: element [h, b] multiplies every int8 of head h in
// block b. They are nil for a float32 cache.
func (c *Cache) KeyScales(layer int) []float32 { return pick(c.mem.keyScale, layer) }

// ValueScales: see KeyScales.
func (c *Cache) ValueScales(layer int) []float32 { return pick(c.mem.valueScale, layer) }

// SlotOffset is the element offset in any pool of the first element of
// head's row for slot (slot = block*BlockSize + position in block).
func (c *Cache) SlotOffset(head int, slot int64) int {
	return head*c.headStride + int(slot)*c.cfg.HeadDim
}

func pick[T any](s [][]T, i int) []T {
	if i < 0 || i >= len(s) {
		return nil
	}
	return s[i]
}

// FreeBlocks is the number of blocks an allocation may take now: free ones
// plus cached ones no sequence references (evicted on demand).
func (c *Cache) FreeBlocks() int { return c.blocks.available() }

func (c *Cache) checkOpen(op string) error {
	if c.closed {
		return fmt.Errorf("%w: %s", ErrClosed, op)
	}
	return nil
}
