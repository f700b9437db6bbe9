package kvcache

import (
	"fmt"
	"slices"
)

// Sequence is one token stream's view of the cache: its tokens (prompt and
// generated), the blocks holding their keys and values, and how many of
// them are computed (their K/V written to the pool; the graph's
// context_lens). Positions [Computed, Len) are known tokens still to run.
//
// A Sequence belongs to its Cache's owner goroutine and is not safe for
// concurrent use.
type Sequence struct {
	c        *Cache
	id       uint64
	tokens   []int32
	blocks   []int32
	hashes   []uint64 // memo: chain hash of full token block i
	computed int
	nreg     int // leading full blocks already offered to the prefix index
	cached   int // tokens the prefix cache supplied at the last attach
	freed    bool
	uncached bool // NewSequenceUncached: attach takes nothing from the prefix cache
}

// NewSequence starts a sequence for prompt. Leading full blocks of the
// prompt found in the prefix cache are attached by reference: Computed (and
// Cached) then report how many prompt tokens need no prefill. The last
// prompt token is always left to compute, since its logits are needed.
// No other blocks are allocated until Reserve.
func (c *Cache) NewSequence(prompt []int32) (*Sequence, error) {
	if err := c.checkOpen("new sequence"); err != nil {
		return nil, err
	}
	c.nextID++
	s := &Sequence{c: c, id: c.nextID, tokens: make([]int32, len(prompt), len(prompt)+c.bs)}
	copy(s.tokens, prompt)
	c.live[s] = struct{}{}
	c.stats.sequences.Add(1)
	s.attach()
	return s, nil
}

// NewSequenceUncached is NewSequence taking nothing from the prefix cache:
// every token is computed (an embedding needs every position's hidden
// state). Its full blocks are offered to the prefix cache as usual.
func (c *Cache) NewSequenceUncached(prompt []int32) (*Sequence, error) {
	if err := c.checkOpen("new sequence"); err != nil {
		return nil, err
	}
	c.nextID++
	s := &Sequence{c: c, id: c.nextID, tokens: make([]int32, len(prompt), len(prompt)+c.bs), uncached: true}
	copy(s.tokens, prompt)
	c.live[s] = struct{}{}
	c.stats.sequences.Add(1)
	s.attach()
	return s, nil
}

// attach takes the cached prefix of the sequence's tokens.
func (s *Sequence) attach() {
	c := s.c
	full := max(len(s.tokens)-1, 0) / c.bs
	c.stats.queryTokens.Add(int64(len(s.tokens)))
	c.stats.queryBlocks.Add(int64(full))
	if !c.cfg.DisablePrefixCache && !s.uncached {
		for i := range full {
			parent := s.parentOf(i)
			toks := s.tokens[i*c.bs : (i+1)*c.bs]
			b, ok := c.prefix.find(parent, s.hashAt(i), toks)
			if ok {
				c.acquire(b)
			} else if b, ok = c.restore(s.last(), parent, s.hashAt(i), toks); !ok {
				break // in neither memory nor the persisted file
			}
			c.markReused(b)
			s.blocks = append(s.blocks, b)
		}
	}
	s.computed = len(s.blocks) * c.bs
	s.nreg = len(s.blocks)
	s.cached = s.computed
	c.stats.hitTokens.Add(int64(s.computed))
	c.stats.hitBlocks.Add(int64(len(s.blocks)))
}

// last is the sequence's last block, none before its first.
func (s *Sequence) last() int32 {
	if len(s.blocks) == 0 {
		return none
	}
	return s.blocks[len(s.blocks)-1]
}

// hashAt returns the chain hash of full token block i, memoised.
func (s *Sequence) hashAt(i int) uint64 {
	for j := len(s.hashes); j <= i; j++ {
		s.hashes = append(s.hashes, chainHash(s.parentOf(j), s.tokens[j*s.c.bs:(j+1)*s.c.bs]))
	}
	return s.hashes[i]
}

func (s *Sequence) parentOf(i int) uint64 {
	if i == 0 {
		return rootHash
	}
	return s.hashAt(i - 1)
}

// ID is unique among the cache's sequences.
func (s *Sequence) ID() uint64 { return s.id }

// Len is the number of known tokens (prompt plus appended).
func (s *Sequence) Len() int { return len(s.tokens) }

// Computed is the number of tokens whose keys and values are in the pool:
// the context length the graph reads.
func (s *Sequence) Computed() int { return s.computed }

// Cached is the number of prompt tokens the prefix cache supplied when the
// sequence was created (or last resumed).
func (s *Sequence) Cached() int { return s.cached }

// NumBlocks is the length of the sequence's block table.
func (s *Sequence) NumBlocks() int { return len(s.blocks) }

// Tokens returns the known tokens. The slice aliases the sequence: do not
// modify it, and do not keep it past the next Append.
func (s *Sequence) Tokens() []int32 { return s.tokens }

func (s *Sequence) usable(op string) error {
	if s.c.closed {
		return fmt.Errorf("%w: %s", ErrClosed, op)
	}
	if s.freed {
		return fmt.Errorf("%w: %s sequence %d", ErrSequenceFreed, op, s.id)
	}
	return nil
}

// Append adds known tokens (typically the one just sampled). It allocates
// no blocks: Reserve does, for the tokens a step will compute.
func (s *Sequence) Append(tokens ...int32) error {
	if err := s.usable("append"); err != nil {
		return err
	}
	s.tokens = append(s.tokens, tokens...)
	return nil
}

// BlocksNeeded is how many blocks Reserve(n) would take now, counting the
// copy of a shared partial block.
func (s *Sequence) BlocksNeeded(n int) int {
	if s.freed || n <= 0 {
		return 0
	}
	bs := s.c.bs
	end := s.computed + n
	last := (end + bs - 1) / bs
	need := max(last-len(s.blocks), 0)
	for i := s.computed / bs; i < min(len(s.blocks), last); i++ {
		if s.c.blocks.ref[s.blocks[i]] > 1 {
			need++
		}
	}
	return need
}

// Reserve makes slots for the next n tokens to compute, positions
// [Computed, Computed+n), which must be known (≤ Len). It allocates blocks
// as they fill and copies a block it shares with a fork before it is
// written (copy-on-write). On failure nothing changes and the error is an
// *OutOfBlocksError.
func (s *Sequence) Reserve(n int) error {
	if err := s.usable("reserve"); err != nil {
		return err
	}
	if n < 0 || s.computed+n > len(s.tokens) {
		return fmt.Errorf("%w: reserve %d tokens with %d of %d computed", ErrInvalidArgument, n, s.computed, len(s.tokens))
	}
	c := s.c
	if need, free := s.BlocksNeeded(n), c.blocks.available(); need > free {
		return &OutOfBlocksError{Op: "reserve", Needed: need, Free: free}
	}
	bs := c.bs
	end := s.computed + n
	first := s.computed / bs
	for i := first; i < len(s.blocks) && i*bs < end; i++ {
		if old := s.blocks[i]; c.blocks.ref[old] > 1 {
			after := none
			if i > 0 {
				after = s.blocks[i-1]
			}
			nb := c.allocBlock(after)
			c.copyBlock(nb, old)
			c.grow(nb, s.computed-i*bs)
			c.release(old)
			s.blocks[i] = nb
		}
	}
	for len(s.blocks)*bs < end {
		s.blocks = append(s.blocks, c.allocBlock(s.last()))
	}
	for i := first; i*bs < end; i++ {
		c.grow(s.blocks[i], min(end-i*bs, bs))
	}
	return nil
}

// Slots appends to dst the slot of each of the next n positions
// [Computed, Computed+n): block*BlockSize + offset, the index Scatter
// writes. The positions must be reserved.
func (s *Sequence) Slots(dst []int64, n int) ([]int64, error) {
	if err := s.usable("slots"); err != nil {
		return dst, err
	}
	bs := s.c.bs
	if n < 0 || s.computed+n > len(s.blocks)*bs {
		return dst, fmt.Errorf("%w: %d slots from position %d, %d reserved", ErrNotReserved, n, s.computed, len(s.blocks)*bs)
	}
	for p := s.computed; p < s.computed+n; {
		b := s.blocks[p/bs]
		if s.c.blocks.ref[b] > 1 {
			return dst, fmt.Errorf("%w: block %d at position %d is shared (Reserve copies it)", ErrNotReserved, b, p)
		}
		stop := min((p/bs+1)*bs, s.computed+n)
		for ; p < stop; p++ {
			dst = append(dst, int64(b)*int64(bs)+int64(p%bs))
		}
	}
	return dst, nil
}

// MarkComputed records that the next n tokens' keys and values are now in
// the pool (after Scatter of the step that computed them). Blocks it
// completes enter the prefix cache: only computed blocks are ever shared.
func (s *Sequence) MarkComputed(n int) error {
	if err := s.usable("mark computed"); err != nil {
		return err
	}
	if n < 0 || s.computed+n > min(len(s.tokens), len(s.blocks)*s.c.bs) {
		return fmt.Errorf("%w: mark %d computed from %d, %d reserved, %d known", ErrNotReserved, n, s.computed, len(s.blocks)*s.c.bs, len(s.tokens))
	}
	s.computed += n
	if s.c.cfg.DisablePrefixCache {
		return nil
	}
	bs := s.c.bs
	full := s.computed / bs
	for i := s.nreg; i < full; i++ {
		s.c.addPrefix(s.blocks[i], s.parentOf(i), s.hashAt(i), s.tokens[i*bs:(i+1)*bs])
	}
	s.nreg = max(s.nreg, full)
	return nil
}

// padBlock fills block-table rows past a sequence's blocks. Any valid id
// works (the graph masks those positions) and 0 always exists.
const padBlock = 0

// BlockTable appends the sequence's block ids to dst, padded to width with
// a valid block id: the int64 row the decoder graph's Gather reads.
func (s *Sequence) BlockTable(dst []int64, width int) ([]int64, error) {
	if err := s.usable("block table"); err != nil {
		return dst, err
	}
	if len(s.blocks) > width {
		return dst, fmt.Errorf("%w: %d blocks exceed table width %d", ErrInvalidArgument, len(s.blocks), width)
	}
	for _, b := range s.blocks {
		dst = append(dst, int64(b))
	}
	for range width - len(s.blocks) {
		dst = append(dst, padBlock)
	}
	return dst, nil
}

// Fork returns a copy of the sequence (for parallel sampling) that shares
// every block by reference. A shared partial block is copied by whichever
// sequence writes it first (in Reserve), so the fork costs no block now.
// Fork between steps: a block reserved for the running step becomes shared
// again, and Slots refuses it until the next Reserve.
func (s *Sequence) Fork() (*Sequence, error) {
	if err := s.usable("fork"); err != nil {
		return nil, err
	}
	c := s.c
	c.nextID++
	f := &Sequence{
		c:        c,
		id:       c.nextID,
		tokens:   slices.Grow(slices.Clone(s.tokens), c.bs),
		blocks:   slices.Clone(s.blocks),
		hashes:   slices.Clone(s.hashes),
		computed: s.computed,
		nreg:     s.nreg,
		cached:   s.cached,
	}
	for _, b := range f.blocks {
		c.blocks.ref[b]++
	}
	c.live[f] = struct{}{}
	c.stats.sequences.Add(1)
	return f, nil
}

// releaseBlocks drops every block reference, last block first, so that of
// the blocks entering the LRU the sequence's tail (least likely to be
// shared) is evicted first.
func (s *Sequence) releaseBlocks() {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		s.c.release(s.blocks[i])
	}
	s.blocks = s.blocks[:0]
}

// Free releases the sequence's blocks (finished or cancelled). Computed
// full blocks stay in the prefix cache until evicted. Free is idempotent;
// the sequence is unusable afterwards.
func (s *Sequence) Free() {
	if s.freed {
		return
	}
	s.releaseBlocks()
	s.freed = true
	delete(s.c.live, s)
	s.c.stats.sequences.Add(-1)
}

// Preempt releases the sequence's blocks but keeps its tokens, so it can be
// recomputed after Resume. Its computed full blocks stay in the prefix
// cache, and Resume gets back those not evicted meanwhile.
func (s *Sequence) Preempt() error {
	if err := s.usable("preempt"); err != nil {
		return err
	}
	s.releaseBlocks()
	s.computed, s.nreg, s.cached = 0, 0, 0
	s.c.stats.preemptions.Add(1)
	return nil
}

// Resume re-attaches a preempted sequence's cached prefix and returns how
// many tokens need no recomputation (also Computed).
func (s *Sequence) Resume() (int, error) {
	if err := s.usable("resume"); err != nil {
		return 0, err
	}
	if len(s.blocks) > 0 {
		return 0, fmt.Errorf("%w: resume sequence %d that holds %d blocks", ErrInvalidArgument, s.id, len(s.blocks))
	}
	s.attach()
	return s.computed, nil
}
