package kvcache

// blockTable is the bookkeeping of every block: how many sequence tables
// reference it, how many of its slots hold tokens, and, for blocks no one
// references, whether it sits on the free list or (holding a prefix-cache
// entry) in the LRU list that eviction drains from the front.
type blockTable struct {
	ref  []int32 // sequence-table references
	fill []int32 // slots holding (or reserved for) tokens, from the block start

	// free holds the unreferenced, uncached blocks as a min-heap: the
	// lowest free id is taken first. A row's blocks are read where they lie
	// (runtime/ort's PagedAttention), and blocks in address order read
	// 1.7× faster than scattered ones (BenchmarkPagedAttentionLayout);
	// taking the lowest keeps sequences admitted together in runs and
	// the cache compact, where a LIFO list scattered them after a few
	// rounds of requests.
	free []int32

	// LRU of unreferenced cached blocks: front is evicted first.
	prev, next []int32
	inLRU      []bool
	head, tail int32
	lruLen     int
}

const none = int32(-1)

func (t *blockTable) init(n, bs int) {
	t.ref = make([]int32, n)
	t.fill = make([]int32, n)
	t.prev = make([]int32, n)
	t.next = make([]int32, n)
	t.inLRU = make([]bool, n)
	t.free = make([]int32, n)
	for i := range n {
		t.free[i] = int32(i) // ascending: already a min-heap
		t.prev[i], t.next[i] = none, none
	}
	t.head, t.tail = none, none
}

func (t *blockTable) available() int { return len(t.free) + t.lruLen }

func (t *blockTable) lruPush(b int32) {
	t.prev[b], t.next[b] = t.tail, none
	if t.tail != none {
		t.next[t.tail] = b
	} else {
		t.head = b
	}
	t.tail = b
	t.inLRU[b] = true
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

// allocBlock takes a block for exclusive use: a free one if any, else the
// least recently used cached one, whose prefix entry is dropped. The caller
// has checked availability.
func (c *Cache) allocBlock() int32 {
	t := &c.blocks
	var b int32
	if len(t.free) > 0 {
		b = t.popFree()
	} else {
		b = t.head
		t.lruRemove(b)
		c.prefix.drop(b)
		c.stats.cached.Add(-1)
		c.stats.evictions.Add(1)
	}
	t.ref[b] = 1
	t.fill[b] = 0
	c.resetScales(b)
	c.stats.noteUsed(1)
	return b
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
	t.pushFree(b)
}

// pushFree and popFree keep free a binary min-heap.
func (t *blockTable) pushFree(b int32) {
	h := append(t.free, b)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p] <= h[i] {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	t.free = h
}

func (t *blockTable) popFree() int32 {
	h := t.free
	b, n := h[0], len(h)-1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if h[i] <= h[c] {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	t.free = h
	return b
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
