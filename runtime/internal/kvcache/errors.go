package kvcache

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidConfig reports a geometry or budget that cannot make a cache.
	ErrInvalidConfig = errors.New("kvcache: invalid config")
	// ErrOutOfBlocks reports that an allocation needs more blocks than are
	// free or evictable. The concrete error is an *OutOfBlocksError.
	ErrOutOfBlocks = errors.New("kvcache: out of blocks")
	// ErrClosed reports use of a closed cache.
	ErrClosed = errors.New("kvcache: cache closed")
	// ErrSequenceFreed reports use of a sequence after Free.
	ErrSequenceFreed = errors.New("kvcache: sequence freed")
	// ErrNotReserved reports slots asked for before Reserve made them
	// writable (not allocated, or still shared with a fork).
	ErrNotReserved = errors.New("kvcache: slots not reserved")
	// ErrInvalidArgument reports an argument out of range or of the wrong shape.
	ErrInvalidArgument = errors.New("kvcache: invalid argument")
)

// OutOfBlocksError is the error an allocation returns when the pool cannot
// supply the blocks it needs. errors.Is(err, ErrOutOfBlocks) holds for it.
type OutOfBlocksError struct {
	Op     string // the operation that failed, e.g. "reserve"
	Needed int    // blocks the operation needed
	Free   int    // blocks free or evictable when it failed
}

func (e *OutOfBlocksError) Error() string {
	return fmt.Sprintf("kvcache: %s: out of blocks (need %d, %d free)", e.Op, e.Needed, e.Free)
}

// Unwrap makes errors.Is(err, ErrOutOfBlocks) true.
func (e *OutOfBlocksError) Unwrap() error { return ErrOutOfBlocks }
