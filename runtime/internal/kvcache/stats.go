package kvcache

import "sync/atomic"

// Stats is a snapshot of the cache's use. Each field is read atomically;
// fields may be skewed against each other by at most the one operation in
// flight on the owner goroutine.
type Stats struct {
	BlockSize      int
	BlockBytes     int64 // bytes of one block, all layers, keys and values
	BlocksTotal    int
	BlocksUsed     int // referenced by at least one sequence
	BlocksCached   int // unreferenced, kept for the prefix cache, evictable
	BlocksFree     int
	PeakBlocksUsed int

	BytesTotal int64 // BlocksTotal × BlockBytes
	BytesUsed  int64 // BlocksUsed × BlockBytes

	// SlotsAllocated is BlocksUsed × BlockSize; SlotsFilled those holding
	// (or reserved for) a token. Waste is the empty share of allocated
	// slots (internal fragmentation in sequences' last blocks).
	SlotsAllocated int64
	SlotsFilled    int64
	Waste          float64

	Sequences int // live sequences

	// Prefix cache: prompt tokens and full prompt blocks looked up at
	// NewSequence/Resume, and how many were found.
	PrefixQueryTokens, PrefixHitTokens int64
	PrefixQueryBlocks, PrefixHitBlocks int64
	PrefixTokenHitRate                 float64
	PrefixBlockHitRate                 float64

	Evictions   int64 // cached blocks reused for new data
	Preemptions int64

	// PrefixRestoredBlocks counts blocks restored from the persisted
	// prefix cache (UsePersisted); PrefixRestoreFailures records that
	// failed their check and were not served.
	PrefixRestoredBlocks  int64
	PrefixRestoreFailures int64
}

// counters are written by the owner goroutine and read by Stats from any.
type counters struct {
	total, blockSize, blockBytes atomic.Int64
	used, peak, cached, filled   atomic.Int64
	sequences                    atomic.Int64
	queryTokens, hitTokens       atomic.Int64
	queryBlocks, hitBlocks       atomic.Int64
	evictions, preemptions       atomic.Int64
	restored, restoreFailures    atomic.Int64
}

func (c *counters) noteUsed(d int64) {
	u := c.used.Add(d)
	if u > c.peak.Load() {
		c.peak.Store(u) // only the owner writes: no lost update
	}
}

// ResetCounters zeroes the counters of lookups, hits, evictions and
// preemptions, and the peak, so that work done before serving (a
// decoder's warm-up run) does not count. Owner goroutine only.
func (c *Cache) ResetCounters() {
	s := &c.stats
	for _, v := range []*atomic.Int64{&s.queryTokens, &s.hitTokens, &s.queryBlocks, &s.hitBlocks, &s.evictions, &s.preemptions} {
		v.Store(0)
	}
	s.peak.Store(s.used.Load())
}

// Stats returns a snapshot. Safe for concurrent use, also after Close.
func (c *Cache) Stats() Stats {
	s := &c.stats
	st := Stats{
		BlockSize:         int(s.blockSize.Load()),
		BlockBytes:        s.blockBytes.Load(),
		BlocksTotal:       int(s.total.Load()),
		BlocksUsed:        int(s.used.Load()),
		BlocksCached:      int(s.cached.Load()),
		PeakBlocksUsed:    int(s.peak.Load()),
		SlotsFilled:       s.filled.Load(),
		Sequences:         int(s.sequences.Load()),
		PrefixQueryTokens: s.queryTokens.Load(),
		PrefixHitTokens:   s.hitTokens.Load(),
		PrefixQueryBlocks: s.queryBlocks.Load(),
		PrefixHitBlocks:   s.hitBlocks.Load(),
		Evictions:         s.evictions.Load(),
		Preemptions:       s.preemptions.Load(),

		PrefixRestoredBlocks:  s.restored.Load(),
		PrefixRestoreFailures: s.restoreFailures.Load(),
	}
	st.BlocksFree = max(st.BlocksTotal-st.BlocksUsed-st.BlocksCached, 0)
	st.BytesTotal = int64(st.BlocksTotal) * st.BlockBytes
	st.BytesUsed = int64(st.BlocksUsed) * st.BlockBytes
	st.SlotsAllocated = int64(st.BlocksUsed) * int64(st.BlockSize)
	st.Waste = ratio(st.SlotsAllocated-st.SlotsFilled, st.SlotsAllocated)
	st.PrefixTokenHitRate = ratio(st.PrefixHitTokens, st.PrefixQueryTokens)
	st.PrefixBlockHitRate = ratio(st.PrefixHitBlocks, st.PrefixQueryBlocks)
	return st
}

func ratio(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return max(float64(a)/float64(b), 0)
}
