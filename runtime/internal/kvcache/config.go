package kvcache

import (
	"fmt"
	"math"
)

// DType is the element type of the key/value pools.
type DType uint8

const (
	// Float32 stores keys and values as float32 (the zero value).
	Float32 DType = iota
	// Int8 stores keys and values as int8 with one float32 scale per
	// (layer, block, head); it halves memory against float16 and quarters
	// it against float32.
	Int8
	// Float16 stores keys and values as IEEE float16 (rounded to nearest,
	// ties to even, on the way in): half the memory of float32, and what
	// llama.cpp keeps by default.
	Float16
)

// String returns "fp32", "int8" or "fp16".
func (d DType) String() string {
	switch d {
	case Float32:
		return "fp32"
	case Int8:
		return "int8"
	case Float16:
		return "fp16"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size is the byte size of one element.
func (d DType) Size() int {
	switch d {
	case Int8:
		return 1
	case Float16:
		return 2
	}
	return 4
}

// DefaultBlockSize is the usual number of tokens per block: internal waste
// is at most BlockSize-1 slots per sequence, and the decoder graph's Gather
// moves whole blocks, so 16 balances the two.
const DefaultBlockSize = 16

// Config describes the cache. It is plain data (it travels in model
// manifests). Every field except DType and the switches below is required:
// a zero there is an error rather than a silent default, because a cache
// built from a wrong geometry would corrupt attention without failing.
type Config struct {
	Layers  int   // decoder layers; one key and one value pool each
	KVHeads int   // key/value heads per layer
	HeadDim int   // elements per head
	DType   DType // element type; zero is Float32

	// BlockSize is tokens per block; DefaultBlockSize is the usual choice.
	BlockSize int

	// Options are the switches a user sets (budget, prefix sharing,
	// prefault, huge pages); the engine's KVOptions and the decoder's
	// options carry exactly these.
	Options
}

// Options are the KV cache's user-facing switches: the one declaration of
// them (the engine and the decoder embed or convert it). Plain data; the
// zero value is a usable default except for the budget, which the decoder
// defaults.
type Options struct {
	// BudgetBytes is the memory the pools may use, scales included. The
	// cache holds as many whole blocks as fit.
	BudgetBytes int64 `json:"budget_bytes,omitempty"`
	// DisablePrefixCache turns off sharing of computed prompt blocks
	// between sequences. Zero (false) keeps it on.
	DisablePrefixCache bool `json:"disable_prefix_cache,omitempty"`

	// Prefault commits the whole budget when the cache is built
	// (MAP_POPULATE) instead of page by page on first use. Lazily, a block
	// first written costs a page fault per (layer, K/V, head) — 96 for
	// synthetic-110m — on the decode step whose rows opened fresh blocks,
	// and a long first prompt pays thousands. Prefaulted, that cost moves
	// to New (TestPrefault checks the pool is resident after it) and the
	// process's memory is the budget from the start (no surprise
	// later): the choice for a device serving latency objectives. Zero
	// (false) maps lazily.
	Prefault bool `json:"prefault,omitempty"`

	// DisableHugePages maps the pools with base pages only. By default the
	// pools are advised transparent huge pages (see mapZeroed: fewer TLB
	// misses on the decode step's scattered block reads), which also means a first write commits
	// 2 MiB rather than 4 KiB, so resident memory climbs towards the budget
	// sooner; set this where an oversized budget must stay mostly
	// unbacked.
	DisableHugePages bool `json:"disable_huge_pages,omitempty"`
}

// BlockBytes is the memory one block takes across all layers, keys and
// values, scales included.
func (c Config) BlockBytes() int64 {
	perHead := int64(c.BlockSize) * int64(c.HeadDim) * int64(c.DType.Size())
	if c.DType == Int8 {
		perHead += 4 // one float32 scale per (block, head)
	}
	return int64(c.Layers) * 2 * int64(c.KVHeads) * perHead
}

// NumBlocks is how many blocks the budget holds (0 if it holds none).
func (c Config) NumBlocks() int {
	bb := c.BlockBytes()
	if bb <= 0 {
		return 0
	}
	return int(c.BudgetBytes / bb)
}

// maxBlocks keeps block ids and slot numbers inside int32 bookkeeping.
const maxBlocks = 1 << 30

// Validate reports the first problem with the config, wrapped in
// ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.Layers <= 0:
		return fmt.Errorf("%w: layers %d must be positive", ErrInvalidConfig, c.Layers)
	case c.KVHeads <= 0:
		return fmt.Errorf("%w: kv heads %d must be positive", ErrInvalidConfig, c.KVHeads)
	case c.HeadDim <= 0:
		return fmt.Errorf("%w: head dim %d must be positive", ErrInvalidConfig, c.HeadDim)
	case c.DType != Float32 && c.DType != Int8 && c.DType != Float16:
		return fmt.Errorf("%w: unknown dtype %v", ErrInvalidConfig, c.DType)
	case c.BlockSize <= 0:
		return fmt.Errorf("%w: block size %d must be positive (DefaultBlockSize is %d)", ErrInvalidConfig, c.BlockSize, DefaultBlockSize)
	case float64(c.Layers)*2*float64(c.KVHeads)*float64(c.BlockSize)*(float64(c.HeadDim)*4+4) > 1<<62:
		// Checked in float64 so that BlockBytes below cannot overflow.
		return fmt.Errorf("%w: geometry %d layers × %d heads × %d dims × %d tokens is implausibly large", ErrInvalidConfig, c.Layers, c.KVHeads, c.HeadDim, c.BlockSize)
	case c.BudgetBytes < c.BlockBytes():
		return fmt.Errorf("%w: budget %d bytes is smaller than one block (%d bytes)", ErrInvalidConfig, c.BudgetBytes, c.BlockBytes())
	case c.BudgetBytes/c.BlockBytes()*c.BlockBytes() > math.MaxInt:
		return fmt.Errorf("%w: budget %d bytes exceeds this platform's address space", ErrInvalidConfig, c.BudgetBytes)
	case c.BudgetBytes/c.BlockBytes()*int64(c.BlockSize) > maxBlocks:
		return fmt.Errorf("%w: %d blocks of %d tokens exceed %d slots", ErrInvalidConfig, c.NumBlocks(), c.BlockSize, maxBlocks)
	}
	return nil
}
