package sched

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// fakeExec is a deterministic Executor for tests. Its "model" samples the
// next token as a hash of the full sequence, so any bookkeeping error in
// preemption and resume changes the output. Its step time follows the cost
// model a + b·tokens + c·context, slept with time.Sleep so that inside a
// synctest bubble time is exact. Its KV is a paged pool of blockSize-token
// blocks. It checks the scheduler's side of the contract and records
// violations in errs.
type fakeExec struct {
	a, b, c   time.Duration // step cost: a + b·tokens + c·context tokens
	inferA    time.Duration // one-shot batch cost: inferA + inferB·n
	inferB    time.Duration
	blockSize int
	stopAfter int // when > 0, the stop token comes after this many generated tokens
	prefix    []int32
	failStep  int           // when > 0, the failStep-th step fails
	coldStep  time.Duration // added to the first step (a session's first run)

	mu struct {
		sync.Mutex
		free     int
		seqs     map[SeqID]*fakeSeq
		steps    int
		errs     []string
		released map[SeqID]int
		batches  []int // one-shot batch sizes
		decodeB  []int // decode rows per step
		chunks   []int // largest prefill chunk per step
		// firstRows: decode rows of the step that ended a sequence's
		// prompt (its first token), by sequence
		firstRows map[SeqID]int
	}
}

type fakeSeq struct {
	tokens    []int32 // known tokens: admitted ones plus sampled ones
	promptLen int
	computed  int // tokens whose KV is computed
	blocks    int
}

func newFake(blocks, blockSize int) *fakeExec {
	f := &fakeExec{
		a: time.Millisecond, b: 20 * time.Microsecond, c: 10 * time.Nanosecond,
		inferA: 2 * time.Millisecond, inferB: time.Millisecond, blockSize: blockSize,
	}
	f.mu.free = blocks
	f.mu.seqs = map[SeqID]*fakeSeq{}
	f.mu.released = map[SeqID]int{}
	f.mu.firstRows = map[SeqID]int{}
	return f
}

// next is the fake model: a function of the whole sequence.
func next(tokens []int32) int32 {
	h := uint32(2166136261)
	for _, t := range tokens {
		h = (h ^ uint32(t)) * 16777619
	}
	return int32(h%997) + 1
}

// reference generates n tokens without any scheduler.
func reference(prompt []int32, n int) []int32 {
	seq := append([]int32(nil), prompt...)
	for range n {
		seq = append(seq, next(seq))
	}
	return seq[len(prompt):]
}

func (f *fakeExec) blocksFor(n int) int { return (n + f.blockSize - 1) / f.blockSize }

func (f *fakeExec) errorf(format string, args ...any) {
	f.mu.errs = append(f.mu.errs, fmt.Sprintf(format, args...))
}

func (f *fakeExec) Admit(_ context.Context, seq Sequence) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.mu.seqs[seq.ID]; ok {
		f.errorf("admit %d twice", seq.ID)
	}
	if f.blocksFor(len(seq.Tokens)+seq.Reserve) > f.mu.free {
		return 0, fmt.Errorf("fake: admit %d: %w", seq.ID, ErrNoCapacity)
	}
	n := f.blocksFor(len(seq.Tokens))
	f.mu.free -= n
	cached := 0
	if len(f.prefix) > 0 && len(seq.Tokens) >= len(f.prefix) && equal(seq.Tokens[:len(f.prefix)], f.prefix) {
		cached = len(f.prefix)
	}
	f.mu.seqs[seq.ID] = &fakeSeq{tokens: append([]int32(nil), seq.Tokens...), promptLen: seq.PromptLen, computed: cached, blocks: n}
	return cached, nil
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (f *fakeExec) Extend(id SeqID, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.mu.seqs[id]
	if s == nil {
		f.errorf("extend unknown %d", id)
		return nil
	}
	need := f.blocksFor(len(s.tokens)+n) - s.blocks
	if need > f.mu.free {
		return fmt.Errorf("fake: extend %d: %w", id, ErrNoCapacity)
	}
	if need > 0 {
		f.mu.free -= need
		s.blocks += need
	}
	return nil
}

func (f *fakeExec) Release(id SeqID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.mu.seqs[id]
	if s == nil {
		f.errorf("release unknown %d", id)
		return
	}
	f.mu.free += s.blocks
	delete(f.mu.seqs, id)
	f.mu.released[id]++
}

func (f *fakeExec) Step(ctx context.Context, b *Batch) (StepResult, error) {
	f.mu.Lock()
	f.mu.steps++
	failing := f.failStep > 0 && f.mu.steps == f.failStep
	tokens, context := 0, 0
	var res StepResult
	maxChunk := 0
	for _, r := range b.Decode {
		s := f.mu.seqs[r.Seq]
		switch {
		case s == nil:
			f.errorf("decode unknown %d", r.Seq)
			continue
		case r.Pos != s.computed || r.Pos != len(s.tokens)-1 || r.Token != s.tokens[r.Pos]:
			f.errorf("decode %d: pos %d token %d, fake has computed %d of %d", r.Seq, r.Pos, r.Token, s.computed, len(s.tokens))
		case f.blocksFor(r.Pos+1) > s.blocks:
			f.errorf("decode %d: pos %d beyond %d blocks", r.Seq, r.Pos, s.blocks)
		}
		tokens++
		context += r.Pos
		s.computed = r.Pos + 1
		res.Tokens = append(res.Tokens, f.sampleLocked(r.Seq, s))
	}
	for _, c := range b.Prefill {
		s := f.mu.seqs[c.Seq]
		if s == nil {
			f.errorf("prefill unknown %d", c.Seq)
			continue
		}
		end := c.Pos + len(c.Tokens)
		if c.Pos != s.computed || end > len(s.tokens) || !equal(c.Tokens, s.tokens[c.Pos:end]) || c.Last != (end == len(s.tokens)) {
			f.errorf("prefill %d: [%d,%d) last %v, fake has computed %d of %d", c.Seq, c.Pos, end, c.Last, s.computed, len(s.tokens))
		}
		tokens += len(c.Tokens)
		context += attended(c.Pos, len(c.Tokens))
		maxChunk = max(maxChunk, len(c.Tokens))
		s.computed = end
		if c.Last {
			res.Tokens = append(res.Tokens, f.sampleLocked(c.Seq, s))
			if _, seen := f.mu.firstRows[c.Seq]; !seen {
				f.mu.firstRows[c.Seq] = len(b.Decode)
			}
		}
	}
	f.mu.decodeB = append(f.mu.decodeB, len(b.Decode))
	f.mu.chunks = append(f.mu.chunks, maxChunk)
	steps := f.mu.steps
	f.mu.Unlock()
	d := f.a + time.Duration(tokens)*f.b + time.Duration(context)*f.c
	if steps == 1 {
		d += f.coldStep
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return StepResult{}, ctx.Err()
	}
	if failing {
		return StepResult{}, fmt.Errorf("fake: device lost")
	}
	return res, nil
}

func (f *fakeExec) sampleLocked(id SeqID, s *fakeSeq) Sampled {
	t := next(s.tokens)
	if f.stopAfter > 0 && len(s.tokens)-s.promptLen >= f.stopAfter {
		return Sampled{Seq: id, Token: 0, Stop: FinishStop}
	}
	s.tokens = append(s.tokens, t)
	return Sampled{Seq: id, Token: t}
}

func (f *fakeExec) Infer(ctx context.Context, model string, inputs []any) ([]any, error) {
	f.mu.Lock()
	f.mu.batches = append(f.mu.batches, len(inputs))
	f.mu.Unlock()
	select {
	case <-time.After(f.inferA + time.Duration(len(inputs))*f.inferB):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([]any, len(inputs))
	for i, in := range inputs {
		out[i] = fmt.Sprintf("%s(%v)", model, in)
	}
	return out, nil
}

// attended is the number of (token, cached position) pairs attention
// computes for n tokens starting at position pos: each token attends to
// everything before it.
func attended(pos, n int) int { return n*pos + n*(n-1)/2 }

// cost is the step time of the cost model for decode rows at the given
// positions and prefill chunks given as {pos, n}.
func (f *fakeExec) cost(decodePos []int, chunks [][2]int) time.Duration {
	tokens, ctx := len(decodePos), 0
	for _, p := range decodePos {
		ctx += p
	}
	for _, c := range chunks {
		tokens += c[1]
		ctx += attended(c[0], c[1])
	}
	return f.a + time.Duration(tokens)*f.b + time.Duration(ctx)*f.c
}

// check returns the contract violations seen and whether every KV block is
// back in the pool.
func (f *fakeExec) check(total int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := append([]string(nil), f.mu.errs...)
	if len(f.mu.seqs) != 0 || f.mu.free != total {
		errs = append(errs, fmt.Sprintf("kv leak: %d sequences held, %d of %d blocks free", len(f.mu.seqs), f.mu.free, total))
	}
	return errs
}
