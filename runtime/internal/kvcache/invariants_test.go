package kvcache

import (
	"fmt"
	"slices"
)

// checkInvariants verifies the cache's bookkeeping against its sequences:
// refcounts equal table references, every block is in exactly one of
// used / free list / LRU, prefix entries match their tokens and hashes,
// and the stats counters agree with a recount.
func (c *Cache) checkInvariants() error {
	t := &c.blocks
	n := c.numBlocks
	refs := make([]int32, n)
	for s := range c.live {
		if s.freed {
			return fmt.Errorf("freed sequence %d is live", s.id)
		}
		if s.computed > len(s.tokens) || s.computed > len(s.blocks)*c.bs {
			return fmt.Errorf("seq %d: computed %d, %d tokens, %d blocks", s.id, s.computed, len(s.tokens), len(s.blocks))
		}
		if len(s.blocks) > (len(s.tokens)+c.bs-1)/c.bs {
			return fmt.Errorf("seq %d: %d blocks for %d tokens", s.id, len(s.blocks), len(s.tokens))
		}
		if s.nreg > len(s.blocks) || s.nreg > s.computed/c.bs {
			return fmt.Errorf("seq %d: %d registered blocks, %d blocks, %d computed", s.id, s.nreg, len(s.blocks), s.computed)
		}
		for i, b := range s.blocks {
			if b < 0 || int(b) >= n {
				return fmt.Errorf("seq %d: block id %d out of range", s.id, b)
			}
			refs[b]++
			if c.prefix.hashed[b] {
				toks := s.tokens[i*c.bs : min((i+1)*c.bs, len(s.tokens))]
				if !slices.Equal(toks, c.prefix.blockTokens(b)) {
					return fmt.Errorf("seq %d: cached block %d at %d holds other tokens", s.id, b, i)
				}
				if s.hashAt(i) != c.prefix.hash[b] || s.parentOf(i) != c.prefix.parent[b] {
					return fmt.Errorf("seq %d: cached block %d at %d has another hash chain", s.id, b, i)
				}
			}
		}
	}
	inFree := make([]bool, n)
	nFree := 0
	for b := range n {
		if inFree[b] = t.isFree(int32(b)); inFree[b] {
			nFree++
		}
	}
	if nFree != t.nFree {
		return fmt.Errorf("free set holds %d blocks, its count says %d", nFree, t.nFree)
	}
	lru := 0
	for b, prev := t.head, none; b != none; prev, b = b, t.next[b] {
		if t.prev[b] != prev || !t.inLRU[b] {
			return fmt.Errorf("LRU links broken at block %d", b)
		}
		if lru++; lru > n {
			return fmt.Errorf("LRU cycle")
		}
	}
	if lru != t.lruLen {
		return fmt.Errorf("LRU length %d, counted %d", t.lruLen, lru)
	}
	used, cached, filled, hashed := 0, 0, int64(0), 0
	for b := range n {
		if refs[b] != t.ref[b] {
			return fmt.Errorf("block %d: refcount %d, %d table references", b, t.ref[b], refs[b])
		}
		if t.fill[b] < 0 || int(t.fill[b]) > c.bs {
			return fmt.Errorf("block %d: fill %d", b, t.fill[b])
		}
		h := c.prefix.hashed[b]
		if h {
			hashed++
			if got, ok := c.prefix.byHash[c.prefix.hash[b]]; !ok || got != int32(b) {
				return fmt.Errorf("block %d: hash not indexed", b)
			}
			if chainHash(c.prefix.parent[b], c.prefix.blockTokens(int32(b))) != c.prefix.hash[b] {
				return fmt.Errorf("block %d: hash does not match its tokens", b)
			}
			if int(t.fill[b]) != c.bs {
				return fmt.Errorf("cached block %d not full (%d)", b, t.fill[b])
			}
		}
		switch {
		case t.ref[b] > 0:
			if inFree[b] || t.inLRU[b] {
				return fmt.Errorf("block %d both used and free (free list %v, LRU %v)", b, inFree[b], t.inLRU[b])
			}
			used++
			filled += int64(t.fill[b])
		case t.inLRU[b]:
			if inFree[b] || !h {
				return fmt.Errorf("block %d in LRU: free %v, hashed %v", b, inFree[b], h)
			}
			cached++
		case inFree[b]:
			if h {
				return fmt.Errorf("free block %d still has a prefix entry", b)
			}
		default:
			return fmt.Errorf("block %d leaked: unreferenced, not free, not cached", b)
		}
	}
	if hashed != len(c.prefix.byHash) {
		return fmt.Errorf("%d hashed blocks, %d index entries", hashed, len(c.prefix.byHash))
	}
	st := c.Stats()
	if st.BlocksUsed != used || st.BlocksCached != cached || st.SlotsFilled != filled ||
		st.BlocksFree != t.nFree || st.Sequences != len(c.live) || st.PeakBlocksUsed < used {
		return fmt.Errorf("stats %+v disagree: used %d cached %d free %d filled %d seqs %d", st, used, cached, t.nFree, filled, len(c.live))
	}
	return nil
}
