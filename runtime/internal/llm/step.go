package llm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/internal/grammar"
	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
)

// seqState is what the executor keeps per admitted sequence.
type seqState struct {
	kv        *kvcache.Sequence
	sampler   *Sampler
	promptLen int
	// dec is the request's Decoding (nil: none); matcher its constraint's
	// progress and mask the row's allowed tokens.
	dec     *Decoding
	matcher *grammar.TokenMatcher
	mask    []uint64
	// emb is an embedding request's pooling (embed.go): no token is sampled.
	emb *Embedding
}

// noCapacity turns a KV shortage into the scheduler's "no room now" error.
func noCapacity(op string, err error) error {
	var oob *kvcache.OutOfBlocksError
	if errors.As(err, &oob) || errors.Is(err, kvcache.ErrOutOfBlocks) {
		return fmt.Errorf("llm: %s: %w (%w)", op, sched.ErrNoCapacity, err)
	}
	return fmt.Errorf("llm: %s: %w", op, err)
}

// Admit registers a sequence and reserves KV blocks for all its known
// tokens, after checking that Reserve more tokens would fit too. It returns
// how many leading tokens the prefix cache already holds.
func (m *Model) Admit(_ context.Context, seq sched.Sequence) (int, error) {
	if m.closed {
		return 0, ErrClosed
	}
	n := len(seq.Tokens)
	emb, _ := seq.Attach.(*Embedding)
	switch {
	case n == 0:
		return 0, fmt.Errorf("%w: empty prompt", ErrBatch)
	case emb != nil && !m.HasHiddenStates():
		return 0, fmt.Errorf("%w: %s has no hidden_states output to pool embeddings from", ErrContract, m.name)
	case emb != nil && n > m.geom.MaxPositions:
		return 0, fmt.Errorf("%w: %d tokens, the model's context is %d positions", ErrPromptTooLong, n, m.geom.MaxPositions)
	case emb == nil && n >= m.geom.MaxPositions:
		return 0, fmt.Errorf("%w: %d tokens, the model's context is %d positions (a prompt must leave room for one generated token)", ErrPromptTooLong, n, m.geom.MaxPositions)
	}
	if _, dup := m.seqs[uint64(seq.ID)]; dup {
		return 0, fmt.Errorf("%w: sequence %d admitted twice", ErrBatch, seq.ID)
	}
	bs := m.geom.BlockSize
	extra := (n+seq.Reserve+bs-1)/bs - (n+bs-1)/bs
	if need, free := m.cache.AdmitBlocks(seq.Tokens)+extra, m.cache.FreeBlocks(); need > free {
		return 0, fmt.Errorf("llm: admit %d: %w: needs %d blocks, %d free", seq.ID, sched.ErrNoCapacity, need, free)
	}
	newSeq := m.cache.NewSequence
	if emb != nil {
		newSeq = m.cache.NewSequenceUncached // every position's hidden state is pooled
	}
	kv, err := newSeq(seq.Tokens)
	if err != nil {
		return 0, fmt.Errorf("llm: admit %d: %w", seq.ID, err)
	}
	if err := kv.Reserve(kv.Len() - kv.Computed()); err != nil {
		kv.Free()
		return 0, noCapacity(fmt.Sprintf("admit %d", seq.ID), err)
	}
	sampler, err := NewSampler(seq.Sampling, seq.Tokens[:seq.PromptLen])
	if err != nil {
		kv.Free()
		return 0, err
	}
	for _, t := range seq.Tokens[seq.PromptLen:] {
		sampler.Observe(t) // a resumed sequence: penalties and draw index as before
	}
	st := &seqState{kv: kv, sampler: sampler, promptLen: seq.PromptLen}
	if emb != nil {
		emb.reset(m.io.hiddenSize) // admitted again after a preemption: pool from the start
		st.emb = emb
	}
	if d, ok := seq.Attach.(*Decoding); ok && d != nil {
		st.dec = d
		if d.Constraint != nil {
			if d.Constraint.Vocab().Size() != m.geom.Vocab {
				kv.Free()
				return 0, fmt.Errorf("%w: the constraint's vocabulary has %d tokens, the model's logits %d", ErrBatch, d.Constraint.Vocab().Size(), m.geom.Vocab)
			}
			st.matcher = d.Constraint.NewMatcher()
			st.mask = make([]uint64, (m.geom.Vocab+63)/64)
			for i, t := range seq.Tokens[seq.PromptLen:] {
				// a resumed sequence: the constraint where it was
				if !st.matcher.Accept(t) {
					kv.Free()
					return 0, fmt.Errorf("%w: resumed sequence %d: generated token %d (#%d) breaks its constraint", ErrBatch, seq.ID, t, i)
				}
			}
		}
	}
	m.seqs[uint64(seq.ID)] = st
	return kv.Computed(), nil
}

// Extend allocates the KV slots of the sequence's known but uncomputed
// tokens (the token sampled last step, which the next decode computes).
// Blocks are allocated here, not only checked, so that several sequences
// extended before one step cannot overcommit the cache.
func (m *Model) Extend(id sched.SeqID, _ int) error {
	st := m.seqs[uint64(id)]
	if st == nil {
		return fmt.Errorf("%w: extend unknown sequence %d", ErrBatch, id)
	}
	if err := st.kv.Reserve(st.kv.Len() - st.kv.Computed()); err != nil {
		return noCapacity(fmt.Sprintf("extend %d", id), err)
	}
	return nil
}

// Release frees the sequence's KV blocks (its computed full blocks stay in
// the prefix cache, so a preempted sequence often resumes cheaply).
func (m *Model) Release(id sched.SeqID) {
	if st := m.seqs[uint64(id)]; st != nil {
		st.kv.Free()
		delete(m.seqs, uint64(id))
	}
}

// Step runs the decode rows as one batched run, then each prefill chunk as
// a run of its own (the paged graph pads rows to one length, so mixing a
// 1-token decode row with a long chunk would compute padding).
func (m *Model) Step(ctx context.Context, b *sched.Batch) (sched.StepResult, error) {
	if m.closed {
		return sched.StepResult{}, ErrClosed
	}
	var res sched.StepResult
	if len(b.Decode) > 0 {
		if err := m.decode(ctx, b.Decode, &res); err != nil {
			return sched.StepResult{}, err
		}
	}
	for i := range b.Prefill {
		if err := m.prefill(ctx, &b.Prefill[i], &res); err != nil {
			return sched.StepResult{}, err
		}
	}
	return res, nil
}

func (m *Model) decode(ctx context.Context, rows []sched.DecodeRow, res *sched.StepResult) error {
	io := m.io
	B := len(rows)
	if B > io.maxRows {
		return fmt.Errorf("%w: %d decode rows, the executor was sized for %d (Options.MaxBatch)", ErrBatch, B, io.maxRows)
	}
	seqs := make([]*kvcache.Sequence, B)
	ids, pos, last := int64s(io.ids, B), int64s(io.pos, B), int64s(io.last, B)
	io.slots = io.slots[:0]
	for i, r := range rows {
		st := m.seqs[uint64(r.Seq)]
		if st == nil {
			return fmt.Errorf("%w: decode unknown sequence %d", ErrBatch, r.Seq)
		}
		kv := st.kv
		if kv.Computed() != r.Pos || kv.Len() != r.Pos+1 || kv.Tokens()[r.Pos] != r.Token {
			return fmt.Errorf("%w: decode %d at %d (token %d), cache has %d of %d computed", ErrBatch, r.Seq, r.Pos, r.Token, kv.Computed(), kv.Len())
		}
		var err error
		if io.slots, err = kv.Slots(io.slots, 1); err != nil {
			return fmt.Errorf("llm: decode %d: %w", r.Seq, err)
		}
		seqs[i] = kv
		ids[i], pos[i], last[i] = int64(r.Token), int64(r.Pos), 0
	}
	start := time.Now()
	graph, err := m.runRows(ctx, seqs, 1)
	if err != nil {
		return err
	}
	ran := time.Now()
	for i, r := range rows {
		st := m.seqs[uint64(r.Seq)]
		if st.emb != nil {
			// an embedding's last token, run as a decode row
			m.embedRow(r.Seq, st, i, res)
			continue
		}
		m.sampleRow(r.Seq, st, i, res)
	}
	m.phases.add(B, graph, ran.Sub(start)-graph, time.Since(ran))
	return nil
}

func (m *Model) prefill(ctx context.Context, c *sched.PrefillChunk, res *sched.StepResult) error {
	io := m.io
	st := m.seqs[uint64(c.Seq)]
	if st == nil {
		return fmt.Errorf("%w: prefill unknown sequence %d", ErrBatch, c.Seq)
	}
	kv, T := st.kv, len(c.Tokens)
	if T == 0 || T > io.maxTokens {
		return fmt.Errorf("%w: prefill chunk of %d tokens (the executor takes 1..%d: Options.MaxChunk)", ErrBatch, T, io.maxTokens)
	}
	if kv.Computed() != c.Pos || c.Pos+T > kv.Len() {
		return fmt.Errorf("%w: prefill %d [%d,%d), cache has %d of %d computed", ErrBatch, c.Seq, c.Pos, c.Pos+T, kv.Computed(), kv.Len())
	}
	ids, pos := int64s(io.ids, T), int64s(io.pos, T)
	for t, tok := range c.Tokens {
		ids[t], pos[t] = int64(tok), int64(c.Pos+t)
	}
	int64s(io.last, 1)[0] = int64(T - 1)
	var err error
	if io.slots, err = kv.Slots(io.slots[:0], T); err != nil {
		return fmt.Errorf("llm: prefill %d: %w", c.Seq, err)
	}
	if _, err := m.runRows(ctx, []*kvcache.Sequence{kv}, T); err != nil {
		return err
	}
	switch {
	case st.emb != nil:
		m.embedChunk(c.Seq, st, T, c.Last, res)
	case c.Last:
		m.sampleRow(c.Seq, st, 0, res)
	}
	return nil
}

// runRows fills the block tables (and the graph's slots where it writes
// the pools), runs the graph, scatters the new keys and values into their
// slots where it returned them, and marks the tokens computed. It returns
// the graph's run time (DecodePhases.Graph; with the compatible contract
// the whole call, the past's gather and scatter included).
func (m *Model) runRows(ctx context.Context, seqs []*kvcache.Sequence, T int) (graph time.Duration, err error) {
	if m.compat {
		t0 := time.Now()
		err := m.runCompat(ctx, seqs, T)
		return time.Since(t0), err
	}
	io, g := m.io, m.geom
	B := len(seqs)
	M := max(kvcache.MaxBlocks(seqs), 1)
	if err := m.cache.FillBlockTables(seqs, M, int64s(io.tables, B*M), int64s(io.ctxLens, B)); err != nil {
		return 0, fmt.Errorf("llm: block tables: %w", err)
	}
	if m.writesKV {
		if len(io.slots) != B*T {
			return 0, fmt.Errorf("%w: %d slots for %d×%d tokens", ErrBatch, len(io.slots), B, T)
		}
		copy(int64s(io.slotsIn, B*T), io.slots)
	}
	t0 := time.Now()
	if err := io.run(ctx, B, T, M); err != nil {
		return 0, fmt.Errorf("llm: run %s %d×%d: %w", m.name, B, T, err)
	}
	graph = time.Since(t0)
	if m.writesKV {
		return graph, m.markComputed(seqs, T)
	}
	n := B * g.KVHeads * T * g.HeadDim
	for l := range g.Layers {
		io.newKs[l] = float32s(io.newK[l], n)
		io.newVs[l] = float32s(io.newV[l], n)
	}
	return graph, m.commit(seqs, B, T)
}

// commit scatters the step's new keys and values (io.newKs/newVs, [B, kvH,
// T, D] per layer) into their slots and marks the tokens computed.
func (m *Model) commit(seqs []*kvcache.Sequence, B, T int) error {
	if err := m.cache.Scatter(m.io.newKs, m.io.newVs, B, T, m.io.slots); err != nil {
		return fmt.Errorf("llm: scatter: %w", err)
	}
	return m.markComputed(seqs, T)
}

// markComputed marks T more tokens of each sequence computed.
func (m *Model) markComputed(seqs []*kvcache.Sequence, T int) error {
	for _, s := range seqs {
		if err := s.MarkComputed(T); err != nil {
			return fmt.Errorf("llm: mark computed: %w", err)
		}
	}
	return nil
}

// sampleRow samples row i of the logits for seq (its state st) and
// appends the token.
// End of sequence, and a context with no room for another position, stop
// the sequence (the token is then not emitted).
func (m *Model) sampleRow(id sched.SeqID, st *seqState, i int, res *sched.StepResult) {
	V := m.geom.Vocab
	row := float32s(m.io.logits, (i+1)*V)[i*V:]
	var mask []uint64
	if st.matcher != nil {
		// tokens that may still come out, this one included: the context's
		// room and the request's cap
		left := m.geom.MaxPositions - st.kv.Len()
		if st.dec.MaxTokens > 0 {
			left = min(left, st.dec.MaxTokens-(st.kv.Len()-st.promptLen))
		}
		if st.matcher.Mask(st.mask, left) == 0 {
			// the grammar is complete and the model has no end token: end here
			res.Tokens = append(res.Tokens, sched.Sampled{Seq: id, Token: -1, Stop: sched.FinishStop})
			return
		}
		mask = st.mask
	}
	argmax := -1 // the graph's argmax of the row, where it has one (outputGreedy)
	if m.io.greedy != nil {
		if a := int64s(m.io.greedy, i+1)[i]; a >= 0 && a < int64(V) {
			argmax = int(a)
		}
	}
	tok := st.sampler.SampleMaskedArgmax(row, mask, argmax)
	if st.dec != nil && st.dec.LogProbs != nil {
		st.dec.LogProbs.put(st.kv.Len()-st.promptLen, logProbs(row, mask, tok, st.sampler.p.Temperature, st.dec.TopLogProbs))
	}
	if st.matcher != nil {
		st.matcher.Accept(tok)
	}
	switch {
	case m.eos[tok]:
		res.Tokens = append(res.Tokens, sched.Sampled{Seq: id, Token: tok, Stop: sched.FinishStop})
		return
	case st.kv.Len() >= m.geom.MaxPositions:
		res.Tokens = append(res.Tokens, sched.Sampled{Seq: id, Token: tok, Stop: sched.FinishContextLength})
		return
	}
	st.sampler.Observe(tok)
	if err := st.kv.Append(tok); err != nil {
		// the cache refused the position: no room left in this sequence
		res.Tokens = append(res.Tokens, sched.Sampled{Seq: id, Token: tok, Stop: sched.FinishContextLength})
		return
	}
	res.Tokens = append(res.Tokens, sched.Sampled{Seq: id, Token: tok})
}

// Logits returns row i of the last step's logits (valid until the next
// step); for tests and perplexity.
func (m *Model) Logits(i int) []float32 {
	V := m.geom.Vocab
	return float32s(m.io.logits, (i+1)*V)[i*V:]
}

var _ sched.Decoder = (*Model)(nil)
