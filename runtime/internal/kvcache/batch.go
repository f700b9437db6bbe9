package kvcache

import "fmt"

// CanFit reports whether every sequence in seqs can Reserve n more tokens
// now (the scheduler's check before composing a step). Pass n per
// sequence with CanFitEach.
func (c *Cache) CanFit(seqs []*Sequence, n int) bool {
	need := 0
	for _, s := range seqs {
		need += s.BlocksNeeded(n)
	}
	return need <= c.blocks.available()
}

// CanFitEach is CanFit with n[i] tokens for seqs[i].
func (c *Cache) CanFitEach(seqs []*Sequence, n []int) bool {
	need := 0
	for i, s := range seqs {
		need += s.BlocksNeeded(n[i])
	}
	return need <= c.blocks.available()
}

// FillBlockTables writes the decoder inputs for a step over seqs: tables
// is the row-major [len(seqs), width] block_tables buffer (rows padded with
// a valid block id) and contextLens[i] = seqs[i].Computed(). It allocates
// nothing; the executor reuses both buffers every step.
func (c *Cache) FillBlockTables(seqs []*Sequence, width int, tables, contextLens []int64) error {
	if err := c.checkOpen("fill block tables"); err != nil {
		return err
	}
	if width <= 0 || len(tables) < len(seqs)*width || len(contextLens) < len(seqs) {
		return fmt.Errorf("%w: block tables for %d sequences of width %d need %d ids and %d lengths, got %d and %d",
			ErrInvalidArgument, len(seqs), width, len(seqs)*width, len(seqs), len(tables), len(contextLens))
	}
	for i, s := range seqs {
		row := tables[i*width : i*width : (i+1)*width]
		if _, err := s.BlockTable(row, width); err != nil {
			return err
		}
		contextLens[i] = int64(s.computed)
	}
	return nil
}

// MaxBlocks is the widest block table among seqs: the width a step's
// block_tables needs.
func MaxBlocks(seqs []*Sequence) int {
	w := 0
	for _, s := range seqs {
		w = max(w, len(s.blocks))
	}
	return w
}
