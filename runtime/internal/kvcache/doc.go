// Package kvcache is the paged key/value cache of the decoder executor.
//
// Memory is one anonymous mapping outside the Go heap, sized by a byte
// budget and cut into blocks of BlockSize token slots. Each layer has a key
// pool and a value pool laid out head-major [kvHeads, numBlocks, blockSize,
// headDim], which the decoder graph reads through Gather(pool, block_tables,
// axis=1) without a copy; the executor wraps each pool once as a tensor
// (KeyPool/ValuePool, or the Int8, Float16 and Bytes variants, plus KeyScales and
// ValueScales for int8 pages). A slot is block*BlockSize + offset.
//
// A Sequence holds a block table. Blocks are allocated as tokens are
// reserved, shared by Fork (a shared partial block is copied when first
// written), and, once computed and full, named by a hash chain of their
// tokens so that a later prompt with the same prefix attaches them instead
// of recomputing them. Unreferenced named blocks stay cached in LRU order
// and are evicted only when an allocation needs room.
//
// Where a block lies matters: attention reads a row's blocks in table
// order, and blocks in address order read faster than blocks taken in
// turn by sequences growing together, or scattered (runtime/ort's
// BenchmarkPagedAttentionLayout). So a sequence grows into the block after
// its last where it can, and a new run starts past a gap left for the
// sequence before it. Once the cache is full of prefix entries, the
// state a long-running server reaches, every block taken is an eviction:
// then runs are sought among the free blocks and the cached ones in the
// LRU's older half, evicted a little out of LRU order, rather than the
// least recently used block wherever it lies (TestFullCacheKeepsRuns;
// runtime/engine's BenchmarkBatchScaling with EDGEINFER_BENCH_FULL_CACHE).
//
// # One step
//
// The owner (the scheduler's goroutine) drives a step like this:
//
//	// admission: a new request, or a preempted one coming back
//	if cache.AdmitBlocks(prompt) > cache.FreeBlocks() { /* wait */ }
//	seq, _ := cache.NewSequence(prompt) // seq.Computed() prompt tokens need no prefill
//	// (after seq.Preempt(): n, _ := seq.Resume())
//
//	// compose: n[i] tokens for seqs[i] (1 for decode, a chunk for prefill)
//	if !cache.CanFitEach(seqs, n) { /* preempt someone: victim.Preempt() */ }
//	for i, s := range seqs {
//		s.Reserve(n[i])                        // allocates; *OutOfBlocksError on pressure
//		slots, _ = s.Slots(slots, n[i])        // then pad the row with -1 to the step width
//	}
//	cache.FillBlockTables(seqs, kvcache.MaxBlocks(seqs), tables, contextLens)
//
//	// run the graph on input_ids, position_ids (Computed()+t), tables,
//	// contextLens and the wrapped pools, then
//	cache.Scatter(newKeys, newValues, batch, steps, slots)
//	for i, s := range seqs {
//		s.MarkComputed(n[i]) // completed blocks become shareable
//	}
//	// sample, then for each sequence still running
//	s.Append(token)
//	// finished or cancelled
//	s.Free()
//
// Positions come from Computed: the t-th new token of a row is at position
// Computed()+t, and context_lens is Computed() before MarkComputed.
//
// # Concurrency
//
// A Cache and its Sequences are owned by one goroutine and are not safe for
// concurrent use; only Cache.Stats may be called from other goroutines (it
// reads atomics). This keeps the per-token paths free of locks.
//
// # int8 pages
//
// With DType Int8 keys and values are stored as int8 with one float32 scale
// per (layer, block, head); the graph dequantises after its gather as
// q × scale[head, block]. Scatter quantises; when a later token of a
// partly filled block exceeds its scale, the scale grows (at least 1.5×)
// and the block's rows are requantised, so scales only grow and every value
// reads back within 1.5 steps of its block's final scale (relative RMS
// error about 1 % on gaussian rows).
package kvcache
