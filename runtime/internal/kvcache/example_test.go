package kvcache_test

import (
	"errors"
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
)

// Example runs the per-step sequence of the decoder executor against a
// small cache: admit, reserve, slots, block tables, scatter the graph's new
// K/V, mark computed, append the sampled token, free.
func Example() {
	cfg := kvcache.Config{Layers: 2, KVHeads: 2, HeadDim: 8, BlockSize: 4}
	cfg.BudgetBytes = 16 * cfg.BlockBytes()
	cache, err := kvcache.New(cfg)
	if err != nil {
		panic(err)
	}
	defer cache.Close()
	fmt.Println("pool shape", cache.PoolShape())

	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	seq, _ := cache.NewSequence(prompt)

	// One step: prefill the whole prompt as a 1 × T chunk.
	n := seq.Len() - seq.Computed()
	if err := seq.Reserve(n); err != nil {
		panic(err)
	}
	slots, _ := seq.Slots(nil, n)
	seqs := []*kvcache.Sequence{seq}
	width := kvcache.MaxBlocks(seqs)
	tables := make([]int64, len(seqs)*width)
	contextLens := make([]int64, len(seqs))
	cache.FillBlockTables(seqs, width, tables, contextLens)
	fmt.Println("block_tables", tables, "context_lens", contextLens, "slots", slots)

	// ... run the graph; it returns new_keys.{i} / new_values.{i}
	// shaped [1, kvHeads, n, headDim] ...
	newKeys := make([][]float32, cfg.Layers)
	for l := range newKeys {
		newKeys[l] = make([]float32, cfg.KVHeads*n*cfg.HeadDim)
	}
	if err := cache.Scatter(newKeys, newKeys, 1, n, slots); err != nil {
		panic(err)
	}
	seq.MarkComputed(n)
	seq.Append(42) // the sampled token
	fmt.Println("computed", seq.Computed(), "of", seq.Len())

	// A second request with the same prompt reuses the computed blocks.
	again, _ := cache.NewSequence(prompt)
	fmt.Println("prefix reused", again.Cached(), "tokens")

	// Pressure is an error, never a panic.
	big, _ := cache.NewSequence(make([]int32, 100))
	err = big.Reserve(100)
	var oob *kvcache.OutOfBlocksError
	fmt.Println(errors.Is(err, kvcache.ErrOutOfBlocks), errors.As(err, &oob), oob.Needed, oob.Free)

	for _, s := range []*kvcache.Sequence{seq, again, big} {
		s.Free()
	}
	st := cache.Stats()
	fmt.Println("used", st.BlocksUsed, "cached", st.BlocksCached, "free", st.BlocksFree)
	// Output:
	// pool shape [2 16 4 8]
	// block_tables [0 1 2] context_lens [0] slots [0 1 2 3 4 5 6 7 8 9]
	// computed 10 of 11
	// prefix reused 8 tokens
	// true true 25 13
	// used 0 cached 2 free 14
}
