package kvcache

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// synthetic110m is the KV geometry of the project's reference shape.
func synthetic110m(dt DType, blocks int) Config {
	cfg := Config{Layers: 12, KVHeads: 4, HeadDim: 64, BlockSize: DefaultBlockSize, DType: dt}
	cfg.BudgetBytes = int64(blocks) * cfg.BlockBytes()
	return cfg
}

func mustNew(b *testing.B, cfg Config) *Cache {
	b.Helper()
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// capacityResult is what one continuous-batching simulation measured.
type capacityResult struct {
	meanRunning float64 // sequences holding KV, averaged over steady-state steps
	meanWaste   float64 // Stats().Waste averaged over the same steps
	finalFit    int     // sequences that fit if all sat at their final length at once
	preemptions int64
}

// simulateCapacity runs the cache the way the scheduler will, with a
// backlog that never empties: prompts uniform in [32, 1024] tokens, outputs
// in [16, 512], whole-prompt prefill on admission while free blocks stay
// above a 1 % watermark, one decode token per running sequence per step,
// and on pressure the newest sequence is preempted (recomputed later). Its
// tokens are unique, so no capacity comes from prefix sharing.
func simulateCapacity(tb testing.TB, c *Cache, seed uint64, warmup, steps int) capacityResult {
	r := rand.New(rand.NewPCG(seed, 42))
	next := int32(0)
	type req struct {
		seq       *Sequence
		tokens    []int32
		remaining int
	}
	newReq := func() *req {
		p := 32 + r.IntN(1024-32+1)
		toks := make([]int32, p)
		for i := range toks {
			next++
			toks[i] = next
		}
		return &req{tokens: toks, remaining: 16 + r.IntN(512-16+1)}
	}
	var waiting []*req
	var running []*req
	watermark := max(1, c.NumBlocks()/100)
	var res capacityResult
	var sumRunning, sumWaste float64
	for step := range warmup + steps {
		// Admission, preempted requests first.
		for {
			if len(waiting) == 0 {
				waiting = append(waiting, newReq())
			}
			q := waiting[0]
			toks := q.tokens
			if q.seq != nil {
				toks = q.seq.Tokens()
			}
			if c.AdmitBlocks(toks)+watermark > c.FreeBlocks() {
				break
			}
			waiting = waiting[1:]
			if q.seq == nil {
				s, err := c.NewSequence(q.tokens)
				if err != nil {
					tb.Fatal(err)
				}
				q.seq = s
			} else if _, err := q.seq.Resume(); err != nil {
				tb.Fatal(err)
			}
			n := q.seq.Len() - q.seq.Computed()
			if err := q.seq.Reserve(n); err != nil {
				tb.Fatal(err)
			}
			q.seq.MarkComputed(n)
			q.seq.Append(next) // the token sampled from the prefill's logits
			next++
			q.remaining--
			running = append(running, q)
		}
		// One decode step over every running sequence, oldest first.
		for i := 0; i < len(running); i++ {
			q := running[i]
			for {
				err := q.seq.Reserve(1)
				if err == nil {
					break
				}
				if !errors.Is(err, ErrOutOfBlocks) {
					tb.Fatal(err)
				}
				victim := running[len(running)-1]
				running = running[:len(running)-1]
				victim.seq.Preempt()
				waiting = append([]*req{victim}, waiting...)
				if victim == q {
					break
				}
			}
			if i >= len(running) || running[i] != q {
				break // q itself was preempted; it was the last
			}
			q.seq.MarkComputed(1)
			q.seq.Append(next)
			next++
			q.remaining--
		}
		kept := running[:0]
		for _, q := range running {
			if q.remaining <= 0 {
				q.seq.Free()
				continue
			}
			kept = append(kept, q)
		}
		running = kept
		if step >= warmup {
			sumRunning += float64(len(running))
			sumWaste += c.Stats().Waste
		}
	}
	res.meanRunning = sumRunning / float64(steps)
	res.meanWaste = sumWaste / float64(steps)
	res.preemptions = c.Stats().Preemptions
	for _, q := range running {
		q.seq.Free()
	}
	for _, q := range waiting {
		if q.seq != nil {
			q.seq.Free()
		}
	}
	// Worst case: every sequence at its final length at once.
	var held []*Sequence
	for {
		q := newReq()
		s, _ := c.NewSequence(q.tokens)
		s.Append(make([]int32, q.remaining)...)
		if err := s.Reserve(s.Len() - s.Computed()); err != nil {
			s.Free()
			break
		}
		held = append(held, s)
	}
	res.finalFit = len(held)
	for _, s := range held {
		s.Free()
	}
	return res
}

// BenchmarkCapacity compares, for one byte budget, the sequences a paged
// cache holds in steady state with those that fit when each reserves a
// contiguous max_len (2048) buffer.
func BenchmarkCapacity(b *testing.B) {
	const maxLen, contiguous = 2048, 32
	cfg := synthetic110m(Float32, contiguous*maxLen/DefaultBlockSize) // 1.5 GiB, mapped lazily
	bytesPerToken := cfg.BlockBytes() / int64(cfg.BlockSize)
	if fit := cfg.BudgetBytes / (maxLen * bytesPerToken); fit != contiguous {
		b.Fatalf("contiguous fit %d", fit)
	}
	// Int8 pages in the same budget, against the same float32 contiguous
	// baseline: what paging and int8 give together.
	cfg8 := synthetic110m(Int8, 1)
	cfg8.BudgetBytes = cfg.BudgetBytes
	var res, res8 capacityResult
	for i := range b.N {
		c := mustNew(b, cfg)
		res = simulateCapacity(b, c, uint64(i+1), 1000, 3000)
		c.Close()
		c8 := mustNew(b, cfg8)
		res8 = simulateCapacity(b, c8, uint64(i+1), 1000, 3000)
		c8.Close()
	}
	b.ReportMetric(res.meanRunning/contiguous, "capacity-x")
	b.ReportMetric(res8.meanRunning/contiguous, "int8-capacity-x")
	b.ReportMetric(100*res.meanWaste, "waste-%")
	b.ReportMetric(float64(res.finalFit)/contiguous, "final-len-x")
	b.ReportMetric(float64(res.preemptions), "preemptions")
}

// BenchmarkAppend is the per-token bookkeeping of decode: Append, Reserve
// one slot, MarkComputed (a block allocated and a prefix entry added every
// 16 tokens).
func BenchmarkAppend(b *testing.B) {
	c := mustNew(b, synthetic110m(Float32, 256))
	s, _ := c.NewSequence([]int32{1})
	tok := int32(2)
	b.ReportAllocs()
	for b.Loop() {
		if s.Len() >= 2048 {
			s.Free()
			s, _ = c.NewSequence([]int32{tok})
		}
		if err := s.Reserve(1); err != nil {
			b.Fatal(err)
		}
		s.MarkComputed(1)
		s.Append(tok)
		tok++
	}
}

// BenchmarkSlotMapping measures Slots per token for a 512-token prefill
// chunk and for a batch-8 decode step.
func BenchmarkSlotMapping(b *testing.B) {
	c := mustNew(b, synthetic110m(Float32, 512))
	b.Run("prefill-512", func(b *testing.B) {
		s, _ := c.NewSequence(make([]int32, 512))
		defer s.Free()
		if err := s.Reserve(512); err != nil {
			b.Fatal(err)
		}
		dst := make([]int64, 0, 512)
		start := time.Now()
		for b.Loop() {
			dst, _ = s.Slots(dst[:0], 512)
		}
		b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N)/512, "ns/token")
	})
	b.Run("decode-batch8", func(b *testing.B) {
		var seqs []*Sequence
		for i := range 8 {
			s, _ := c.NewSequence(distinctTokens(200+i, int32(i)<<20))
			s.Reserve(s.Len())
			s.MarkComputed(s.Len() - 1)
			seqs = append(seqs, s)
			defer s.Free()
		}
		dst := make([]int64, 0, 8)
		start := time.Now()
		for b.Loop() {
			dst = dst[:0]
			for _, s := range seqs {
				dst, _ = s.Slots(dst, 1)
			}
		}
		b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N)/8, "ns/token")
	})
}

// BenchmarkPrefixLookup attaches (and releases) the cached prefix of a
// 1,024-token prompt: 63 full blocks by hash chain.
func BenchmarkPrefixLookup(b *testing.B) {
	c := mustNew(b, synthetic110m(Float32, 128))
	prompt := make([]int32, 1024)
	for i := range prompt {
		prompt[i] = int32(1000 + i)
	}
	s, _ := c.NewSequence(prompt)
	s.Reserve(1024)
	s.MarkComputed(1024)
	s.Free()
	b.Run("attach-1024", func(b *testing.B) {
		for b.Loop() {
			s, _ := c.NewSequence(prompt)
			if s.Computed() != 1008 {
				b.Fatalf("hit %d", s.Computed())
			}
			s.Free()
		}
	})
	b.Run("probe-1024", func(b *testing.B) {
		for b.Loop() {
			if c.Lookup(prompt) != 1008 {
				b.Fatal("miss")
			}
		}
	})
}

// BenchmarkScatter writes one decode step's new K/V for batch 8 into the
// pools of all 12 layers of synthetic-110m (and a 256-token prefill chunk).
func BenchmarkScatter(b *testing.B) {
	for _, dt := range []DType{Float32, Int8, Float16} {
		for _, shape := range []struct {
			name         string
			batch, steps int
		}{{"batch8", 8, 1}, {"prefill256", 1, 256}} {
			b.Run(dt.String()+"-"+shape.name, func(b *testing.B) {
				c := mustNew(b, synthetic110m(dt, 512))
				cfg := c.Config()
				r := rand.New(rand.NewPCG(3, 4))
				k := make([][]float32, cfg.Layers)
				v := make([][]float32, cfg.Layers)
				for l := range k {
					k[l] = make([]float32, shape.batch*cfg.KVHeads*shape.steps*cfg.HeadDim)
					v[l] = make([]float32, len(k[l]))
					for i := range k[l] {
						k[l][i], v[l][i] = float32(r.NormFloat64()), float32(r.NormFloat64())
					}
				}
				// Slots as the executor gets them: a decode row per sequence,
				// or one sequence's prefill chunk.
				var slots []int64
				for i := range shape.batch {
					s, _ := c.NewSequence(distinctTokens(100+shape.steps, int32(i)<<20))
					s.Reserve(s.Len())
					s.MarkComputed(100)
					slots, _ = s.Slots(slots, shape.steps)
				}
				b.SetBytes(int64(2 * cfg.Layers * len(k[0]) * 4))
				b.ReportAllocs()
				for b.Loop() {
					if err := c.Scatter(k, v, shape.batch, shape.steps, slots); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkFillBlockTables fills block_tables and context_lens for a
// batch-8 decode step at 2,048 tokens of context.
func BenchmarkFillBlockTables(b *testing.B) {
	c := mustNew(b, synthetic110m(Float32, 8*128))
	var seqs []*Sequence
	for range 8 {
		s, _ := c.NewSequence(distinctTokens(2048, int32(len(seqs))<<20))
		s.Reserve(2048)
		s.MarkComputed(2047)
		seqs = append(seqs, s)
	}
	tables := make([]int64, 8*128)
	lens := make([]int64, 8)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.FillBlockTables(seqs, 128, tables, lens); err != nil {
			b.Fatal(err)
		}
	}
}

func distinctTokens(n int, base int32) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = base + int32(i)
	}
	return t
}
