package tokenizer

import (
	"hash/maphash"
	"sync"
)

// mergeCache remembers the BPE result of recent pieces. Natural text repeats
// a small set of words, so most pieces hit. It is bounded: each shard holds
// at most cap entries and is emptied when full, which costs one re-merge per
// evicted word and needs no bookkeeping on the hit path. Safe for
// concurrent use.
type mergeCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
	cap    int
}

const (
	cacheShards = 16
	// maxCachedPiece keeps pathological pieces (a megabyte of spaces) out.
	maxCachedPiece = 64
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int
}

func newMergeCache(entries int) *mergeCache {
	if entries <= 0 {
		return nil
	}
	return &mergeCache{seed: maphash.MakeSeed(), cap: max(1, entries/cacheShards)}
}

func (c *mergeCache) shard(k string) *cacheShard {
	return &c.shards[maphash.String(c.seed, k)%cacheShards]
}

func (c *mergeCache) get(k string) ([]int, bool) {
	s := c.shard(k)
	s.mu.RLock()
	v, ok := s.m[k]
	s.mu.RUnlock()
	return v, ok
}

// put stores a copy of v: the caller keeps ownership of its slice.
func (c *mergeCache) put(k string, v []int) {
	s := c.shard(k)
	v = append([]int(nil), v...)
	s.mu.Lock()
	if s.m == nil || len(s.m) >= c.cap {
		s.m = make(map[string][]int, c.cap)
	}
	s.m[k] = v
	s.mu.Unlock()
}
