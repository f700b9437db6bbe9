package kvcache

import "slices"

// prefixIndex names computed full blocks by a hash chain: a block's hash
// covers its parent's hash and its own token ids, so equal hashes mean equal
// whole prefixes and a prompt finds its cached blocks front to back. Each
// entry also keeps the block's tokens and parent hash, and a lookup compares
// them, so a 64-bit collision cannot hand out another prompt's keys.
type prefixIndex struct {
	bs     int
	byHash map[uint64]int32
	hashed []bool
	reused []bool // a later sequence found the block here (or it was restored for one); drop clears it
	hash   []uint64
	parent []uint64
	tokens []int32 // bs per block
}

func (p *prefixIndex) init(n, bs int) {
	p.bs = bs
	p.byHash = make(map[uint64]int32)
	p.hashed = make([]bool, n)
	p.reused = make([]bool, n)
	p.hash = make([]uint64, n)
	p.parent = make([]uint64, n)
	p.tokens = make([]int32, n*bs)
}

func (p *prefixIndex) has(b int32) bool { return p.hashed[b] }

func (p *prefixIndex) blockTokens(b int32) []int32 {
	return p.tokens[int(b)*p.bs : int(b+1)*p.bs]
}

// find returns the cached block named h, checking that it holds toks
// after the prefix named parent.
func (p *prefixIndex) find(parent, h uint64, toks []int32) (int32, bool) {
	b, ok := p.byHash[h]
	if !ok || p.parent[b] != parent || !slices.Equal(p.blockTokens(b), toks) {
		return none, false
	}
	return b, true
}

// add names block b; a hash already naming another block keeps that one
// (two sequences computed the same prefix; the later copy stays private).
func (p *prefixIndex) add(b int32, parent, h uint64, toks []int32) {
	if p.hashed[b] {
		return
	}
	if _, dup := p.byHash[h]; dup {
		return
	}
	p.byHash[h] = b
	p.hashed[b] = true
	p.hash[b] = h
	p.parent[b] = parent
	copy(p.blockTokens(b), toks)
}

func (p *prefixIndex) drop(b int32) {
	if !p.hashed[b] {
		return
	}
	delete(p.byHash, p.hash[b])
	p.hashed[b] = false
	p.reused[b] = false
}

// addPrefix enters block b in the prefix index and counts the change for
// savers (PrefixVersion).
func (c *Cache) addPrefix(b int32, parent, h uint64, toks []int32) {
	if !c.prefix.has(b) {
		c.prefixVersion++
	}
	c.prefix.add(b, parent, h, toks)
}

// markReused records that a sequence took block b from the prefix cache
// (or from the persisted file) and counts a block's first reuse for
// savers (ReusedVersion).
func (c *Cache) markReused(b int32) {
	if !c.prefix.reused[b] {
		c.prefix.reused[b] = true
		c.reusedVersion++
	}
}

// rootHash is the parent of a sequence's first block.
const rootHash uint64 = 0x9e3779b97f4a7c15

// chainHash mixes parent and the block's token ids (a multiply-xorshift
// over 32-bit words; BenchmarkPrefixLookup measures a 1,024-token chain).
func chainHash(parent uint64, toks []int32) uint64 {
	h := parent ^ uint64(len(toks))*0xff51afd7ed558ccd
	for _, t := range toks {
		h ^= uint64(uint32(t))
		h *= 0xc4ceb9fe1a85ec53
		h ^= h >> 31
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// Lookup reports how many leading tokens of prompt the prefix cache holds
// now, in memory or in its persisted file, without taking references or
// counting toward hit statistics (for admission estimates). It follows the
// rule NewSequence applies: only full blocks, and never the last prompt
// token, whose logits must be computed.
func (c *Cache) Lookup(prompt []int32) int {
	if c.closed || c.cfg.DisablePrefixCache {
		return 0
	}
	parent := rootHash
	n := 0
	for i := 0; (i+1)*c.bs <= len(prompt)-1; i++ {
		toks := prompt[i*c.bs : (i+1)*c.bs]
		h := chainHash(parent, toks)
		if _, ok := c.prefix.find(parent, h, toks); !ok && !c.persistedHas(parent, h, toks) {
			break
		}
		parent = h
		n += c.bs
	}
	return n
}

// AdmitBlocks is how much FreeBlocks drops if tokens are admitted and all
// of them reserved: NewSequence(tokens) then Reserve(Len()-Computed()).
// Cached blocks already in use by other sequences cost nothing; unreferenced
// cached ones leave the evictable pool, so they count like new ones.
func (c *Cache) AdmitBlocks(tokens []int32) int {
	need := (len(tokens) + c.bs - 1) / c.bs
	if c.closed || c.cfg.DisablePrefixCache {
		return need
	}
	parent := rootHash
	for i := 0; (i+1)*c.bs <= len(tokens)-1; i++ {
		toks := tokens[i*c.bs : (i+1)*c.bs]
		h := chainHash(parent, toks)
		b, ok := c.prefix.find(parent, h, toks)
		if !ok {
			break
		}
		if c.blocks.ref[b] > 0 {
			need--
		}
		parent = h
	}
	return need
}
