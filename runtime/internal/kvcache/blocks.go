package kvcache

import "math/bits"

// blockTable is the bookkeeping of every block: how many sequence tables
// reference it, how many of its slots hold tokens, and, for blocks no one
// references, whether it sits in the free set or (holding a prefix-cache
// entry) in the LRU list that eviction drains from the front.
type blockTable struct {
	ref  []int32 // sequence-table references
	fill []int32 // slots holding (or reserved for) tokens, from the block start

	// free is the set of unreferenced, uncached blocks, a bit a block,
	// nFree of them. Where a block lies decides how fast attention reads
	// it: PagedAttention reads a row's blocks in table order, and blocks in
	// address order read faster than scattered ones, or than the runs of
	// sequences that took turns growing (BenchmarkPagedAttentionLayout's
	// in-order, interleaved and random layouts). So allocBlock gives a
	// sequence the block after its last where that is free, and starts a
	// sequence's new run past a gap of runGap free blocks after the blocks
	// in use, where it can; in a full cache it does the same among the
	// stale cached blocks (placeStale); else it takes the lowest free
	// block, which keeps the cache compact.
	free  []uint64
	nFree int

	// LRU of unreferenced cached blocks: front is evicted first.
	prev, next []int32
	inLRU      []bool
	head, tail int32
	lruLen     int
	pushed     []uint64 // pushes counted when the block entered the LRU
	pushes     uint64

	// noFreeRun and noStaleRun record that placeFree's and placeStale's
	// searches found no run, true until a block is freed or joins the LRU:
	// taking blocks only removes runs. (A block leaving the LRU lowers
	// the age that counts as stale by half a push: the next release looks
	// again.) In a cache too full for runs, most blocks a sequence takes
	// would search in vain (BenchmarkCapacity).
	noFreeRun, noStaleRun bool
}

const none = int32(-1)

func (t *blockTable) init(n, bs int) {
	t.ref = make([]int32, n)
	t.fill = make([]int32, n)
	t.prev = make([]int32, n)
	t.next = make([]int32, n)
	t.inLRU = make([]bool, n)
	t.pushed = make([]uint64, n)
	t.free = make([]uint64, (n+63)/64)
	for i := range n {
		t.setFree(int32(i))
		t.prev[i], t.next[i] = none, none
	}
	t.head, t.tail = none, none
}

func (t *blockTable) available() int { return t.nFree + t.lruLen }

func (t *blockTable) lruPush(b int32) {
	t.prev[b], t.next[b] = t.tail, none
	if t.tail != none {
		t.next[t.tail] = b
	} else {
		t.head = b
	}
	t.tail = b
	t.inLRU[b] = true
	t.pushed[b] = t.pushes
	t.pushes++
	t.noStaleRun = false
	t.lruLen++
}

func (t *blockTable) lruRemove(b int32) {
	p, n := t.prev[b], t.next[b]
	if p != none {
		t.next[p] = n
	} else {
		t.head = n
	}
	if n != none {
		t.prev[n] = p
	} else {
		t.tail = p
	}
	t.prev[b], t.next[b] = none, none
	t.inLRU[b] = false
	t.lruLen--
}

// allocBlock takes a block for exclusive use: the free block placeFree
// picks for a sequence whose last block is after (none for a sequence's
// first block) where that keeps the sequence in a run of addresses; else
// the block placeStale picks among the free and the stale cached ones,
// evicting it if cached; else the lowest free block, or the least recently
// used cached one. An evicted block's prefix entry is dropped. The caller
// has checked availability.
func (c *Cache) allocBlock(after int32) int32 {
	t := &c.blocks
	b, inRun := t.placeFree(after)
	if !inRun && t.lruLen > 0 {
		if r := t.placeStale(after); r != none {
			b = r
		}
	}
	switch {
	case b == none:
		b = t.head
		c.evict(b)
	case t.inLRU[b]:
		c.evict(b)
	default:
		t.take(b)
	}
	t.ref[b] = 1
	t.fill[b] = 0
	c.resetScales(b)
	c.stats.noteUsed(1)
	return b
}

// evict drops cached block b from the LRU and the prefix index.
func (c *Cache) evict(b int32) {
	c.blocks.lruRemove(b)
	c.prefix.drop(b)
	c.stats.cached.Add(-1)
	c.stats.evictions.Add(1)
}

// acquire adds a reference to a block found in the prefix cache.
func (c *Cache) acquire(b int32) {
	t := &c.blocks
	if t.ref[b] == 0 {
		t.lruRemove(b)
		c.stats.cached.Add(-1)
		c.stats.noteUsed(1)
		c.stats.filled.Add(int64(t.fill[b]))
	}
	t.ref[b]++
}

// release drops a reference. An unreferenced block keeps its contents for
// the prefix cache if it has an entry, else it returns to the free list.
func (c *Cache) release(b int32) {
	t := &c.blocks
	t.ref[b]--
	if t.ref[b] > 0 {
		return
	}
	c.stats.noteUsed(-1)
	c.stats.filled.Add(-int64(t.fill[b]))
	if c.prefix.has(b) {
		t.lruPush(b)
		c.stats.cached.Add(1)
		return
	}
	t.fill[b] = 0
	t.setFree(b)
}

// runGap is how many free blocks placeFree leaves after the blocks in use
// when it starts a run: room for a sequence that ends there to grow 128
// tokens (at 16-token blocks) before it has to jump. Sequences admitted
// together each start a run this far apart and decode into their own,
// where taking the lowest free block had them take turns, block by block.
const runGap = 8

func (t *blockTable) isFree(b int32) bool { return t.free[b/64]&(1<<(b%64)) != 0 }

func (t *blockTable) setFree(b int32) {
	t.free[b/64] |= 1 << (b % 64)
	t.nFree++
	t.noFreeRun, t.noStaleRun = false, false
}

// take removes free block b from the set.
func (t *blockTable) take(b int32) {
	t.free[b/64] &^= 1 << (b % 64)
	t.nFree--
}

// placeFree picks a free block for a sequence whose last block is after
// and reports whether the pick keeps the sequence's blocks in runs: the
// block after block after if that is free; else where runStart starts a
// sequence in the first run of free blocks it finds long enough; else, in
// a cache too full for runs, the lowest free block (false), or none if no
// block is free.
func (t *blockTable) placeFree(after int32) (int32, bool) {
	n := int32(len(t.ref))
	if t.nFree == 0 {
		return none, false
	}
	if after != none && after+1 < n && t.isFree(after+1) {
		return after + 1, true
	}
	if !t.noFreeRun {
		for s := t.nextFree(0, true); s < n; s = t.nextFree(s, true) {
			e := t.nextFree(s, false) // [s, e) is a run of free blocks
			if b := t.runStart(s, e); b != none {
				return b, true
			}
			s = e
		}
		t.noFreeRun = true
	}
	return t.nextFree(0, true), false
}

// runStart is where a new run starts in [s, e), a run of blocks that may
// be taken (free ones for placeFree, spare ones for placeStale), or none
// if it is too short: at s where no sequence grows into it (unclaimed)
// and runGap blocks fit or the run ends the cache; runGap blocks in,
// leaving the sequence before room to grow, where another runGap fit.
func (t *blockTable) runStart(s, e int32) int32 {
	switch {
	case t.unclaimed(s):
		if e-s >= runGap || e == int32(len(t.ref)) {
			return s
		}
	case e-s >= 2*runGap:
		return s + runGap
	}
	return none
}

// unclaimed is whether no sequence's block lies just before block s: s is
// the cache's first block, or no sequence references block s-1.
func (t *blockTable) unclaimed(s int32) bool { return s == 0 || t.ref[s-1] == 0 }

// placeStale is placeFree over the spare blocks, free or stale: the block
// after block after, else where runStart starts a run among the spare
// blocks around one of the LRU's oldest staleScan blocks, else the start
// of the longest such run of at least runGap/2 blocks with no sequence's
// block just before it; none if there is no such run. Once every block
// holds tokens (a full prefix cache: the state a long-running server
// reaches), evicting strictly in LRU order hands out blocks from all over
// the pool, one released sequence's last block first, and growing
// sequences then read blocks scattered across it (TestFullCacheKeepsRuns;
// BenchmarkPagedAttentionLayout times the random layout). Blocks in the
// LRU's older half are about to be evicted anyway, so a run among them is
// worth evicting a little out of order. The search looks around the
// oldest blocks only, so a cache too full for runs pays little for it
// each block it hands out (BenchmarkCapacity runs one).
func (t *blockTable) placeStale(after int32) int32 {
	n := int32(len(t.ref))
	if after != none && after+1 < n && t.spare(after+1) {
		return after + 1
	}
	if t.noStaleRun {
		return none
	}
	best, bestLen := none, int32(runGap/2-1)
	var s, e int32 // the last run looked at
	for b, i := t.head, 0; b != none && i < staleScan && t.spare(b); b, i = t.next[b], i+1 {
		if b >= s && b < e {
			continue // in the run just looked at (a run enters the LRU together)
		}
		for s = b; s > 0 && t.spare(s-1); s-- {
		}
		for e = b + 1; e < n && t.spare(e); e++ {
		}
		if r := t.runStart(s, e); r != none {
			return r
		}
		if e-s > bestLen && t.unclaimed(s) {
			best, bestLen = s, e-s
		}
	}
	t.noStaleRun = best == none
	return best
}

// staleScan is how many of the LRU's oldest blocks placeStale looks
// around for a run.
const staleScan = 64

// spare is whether block b may be taken without touching a sequence: it
// is free, or cached in the LRU's older half (pushed more pushes ago than
// half the LRU's length).
func (t *blockTable) spare(b int32) bool {
	return t.isFree(b) || t.inLRU[b] && t.pushes-t.pushed[b] > uint64(t.lruLen/2)
}

// nextFree is the first block from b on whose free bit is want (the
// number of blocks if none is).
func (t *blockTable) nextFree(b int32, want bool) int32 {
	n := int32(len(t.ref))
	for b < n {
		w := t.free[b/64]
		if !want {
			w = ^w
		}
		w >>= b % 64
		if w != 0 {
			return min(b+int32(bits.TrailingZeros64(w)), n)
		}
		b = (b/64 + 1) * 64
	}
	return n
}

// grow records that b's first n slots hold tokens.
func (c *Cache) grow(b int32, n int) {
	if d := int32(n) - c.blocks.fill[b]; d > 0 {
		c.blocks.fill[b] += d
		c.stats.filled.Add(int64(d))
	}
}

// copyBlock copies every layer's keys, values and scales of block src to
// dst (copy-on-write of a block shared by a fork).
func (c *Cache) copyBlock(dst, src int32) {
	esize := c.cfg.DType.Size()
	n := c.blockElems * esize
	for l := range c.cfg.Layers {
		for _, pool := range [2][]byte{c.mem.keyBytes[l], c.mem.valueBytes[l]} {
			for h := range c.cfg.KVHeads {
				base := h * c.headStride * esize
				copy(pool[base+int(dst)*n:base+int(dst)*n+n], pool[base+int(src)*n:base+int(src)*n+n])
			}
		}
		if c.cfg.DType == Int8 {
			for _, sc := range [2][]float32{c.mem.keyScale[l], c.mem.valueScale[l]} {
				for h := range c.cfg.KVHeads {
					sc[h*c.numBlocks+int(dst)] = sc[h*c.numBlocks+int(src)]
				}
			}
		}
	}
	c.grow(dst, int(c.blocks.fill[src]))
}

// resetScales zeroes a newly allocated int8 block's scales, so the first
// row written sets them (see quantise).
func (c *Cache) resetScales(b int32) {
	if c.cfg.DType != Int8 {
		return
	}
	for l := range c.cfg.Layers {
		for h := range c.cfg.KVHeads {
			c.mem.keyScale[l][h*c.numBlocks+int(b)] = 0
			c.mem.valueScale[l][h*c.numBlocks+int(b)] = 0
		}
	}
}
