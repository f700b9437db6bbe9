package sched

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// pendingPrefill is the prefill backlog a sequence contributes: the tokens
// still to compute before its next token, or 0 once it is decoding.
func (g *genReq) pendingPrefill() int {
	if !g.admitted {
		return len(g.tokens)
	}
	if g.prefilled >= len(g.tokens)-1 {
		return 0
	}
	return len(g.tokens) - g.prefilled
}

// step composes and runs one step, then hands out its tokens. It reports
// whether it did anything (ran a step or preempted) and the time spent in
// Executor.Step.
//
// Composition: the running sequences are ordered by class (highest first),
// then admission order; the step serves the model of the first. Every
// decoding sequence of that model gets a row (they are at most MaxBatch);
// growing its KV by one token may preempt the lowest-class, most recently
// admitted sequence. Then the rest of TokenBudget goes to prefill chunks of
// at most ChunkSize tokens, at most MaxPrefillChunks of them, in the same
// order. A decoding sequence thus waits at most one step of bounded size,
// however long the prompts arriving beside it.
func (s *Scheduler[P]) step() (bool, time.Duration) {
	if len(s.running) == 0 {
		return false, 0
	}
	s.order = append(s.order[:0], s.running...)
	slices.SortFunc(s.order, func(a, b *genReq) int {
		if a.class != b.class {
			return cmp.Compare(b.class, a.class)
		}
		return cmp.Compare(a.admitOrder, b.admitOrder)
	})
	b := &s.batch
	b.Model, b.Decode, b.Prefill = s.order[0].req.Model, b.Decode[:0], b.Prefill[:0]
	preempted := false
	skipLate := s.onTimeFirstToken(b.Model)

	for _, g := range s.order {
		if !g.admitted || g.req.Model != b.Model || g.prefilled < len(g.tokens)-1 {
			continue
		}
		if skipLate && g.late {
			continue // yields this step to an on-time request's first token
		}
		if !s.grow(g) {
			preempted = true
			continue
		}
		g.wantToken = true
		b.Decode = append(b.Decode, DecodeRow{Seq: g.id, Token: g.tokens[len(g.tokens)-1], Pos: g.prefilled})
	}
	if len(b.Decode) < len(s.order) && preempted {
		// A preemption may have removed a row appended earlier.
		b.Decode = slices.DeleteFunc(b.Decode, func(r DecodeRow) bool { _, ok := s.byID[r.Seq]; return !ok })
	}
	budget := max(s.cfg.TokenBudget-len(b.Decode), 1)
	for _, g := range s.order {
		if len(b.Prefill) >= s.cfg.MaxPrefillChunks || budget <= 0 {
			break
		}
		if !g.admitted || g.req.Model != b.Model || g.prefilled >= len(g.tokens)-1 {
			continue
		}
		n := min(s.cfg.ChunkSize, len(g.tokens)-g.prefilled, budget)
		budget -= n
		last := g.prefilled+n == len(g.tokens)
		g.wantToken = last
		b.Prefill = append(b.Prefill, PrefillChunk{Seq: g.id, Tokens: g.tokens[g.prefilled : g.prefilled+n], Pos: g.prefilled, Last: last})
	}
	if len(b.Decode) == 0 && len(b.Prefill) == 0 {
		return preempted, 0
	}

	s.mu.Lock()
	backlogged := s.backlogLocked() > 0
	waiting := false // requests still queued after this iteration's admissions
	for _, q := range s.mu.queue {
		waiting = waiting || len(q) > 0
	}
	s.mu.Unlock()
	start := time.Now()
	s.markScheduled(b, start)
	res, err := s.dec.Step(s.life, b)
	end := time.Now()
	exec := end.Sub(start)
	if err != nil {
		s.failBatch(b, end, err)
		return true, exec
	}
	s.apply(b, res, end, exec, backlogged, waiting)
	return true, exec
}

// onTimeFirstToken reports whether the step's first prefill chunk would
// end the prompt of a request that can still meet its TTFT objective
// while streams admitted late are decoding. Then the late streams sit this
// one step out: their decode rows would add a batched run to that
// request's first token, after a burst the difference between the
// recovery's TTFT and the baseline's (the overload profile's recovery
// figures), while a late stream has missed its objective already and
// loses one step per on-time arrival. It never applies under StrictFIFO.
func (s *Scheduler[P]) onTimeFirstToken(model string) bool {
	if s.cfg.StrictFIFO {
		return false
	}
	anyLate := false
	for _, g := range s.order {
		anyLate = anyLate || (g.late && g.req.Model == model)
	}
	if !anyLate {
		return false
	}
	for _, g := range s.order {
		if !g.admitted || g.req.Model != model || g.prefilled >= len(g.tokens)-1 {
			continue
		}
		// the first chunk the prefill loop below would take
		last := g.prefilled+min(s.cfg.ChunkSize, s.cfg.TokenBudget) >= len(g.tokens)
		return last && !g.late && g.req.SLO.TTFT > 0 && g.tl.FirstToken.IsZero()
	}
	return false
}

// grow makes sure the Executor holds KV for every token of g (the decode row
// writes the KV of its last token). On ErrNoCapacity it preempts victims
// until it fits or g itself is the victim; it reports whether g can decode.
func (s *Scheduler[P]) grow(g *genReq) bool {
	for g.reserved < len(g.tokens) {
		err := s.dec.Extend(g.id, len(g.tokens)-g.reserved)
		if err == nil {
			g.reserved = len(g.tokens)
			return true
		}
		if !errors.Is(err, ErrNoCapacity) {
			s.finishGen(g, time.Now(), OutcomeFailed, fmt.Errorf("sched: request %d: extend: %w", g.id, err))
			return false
		}
		v := s.victim()
		s.preempt(v, "kv")
		if v == g {
			return false
		}
	}
	return true
}

func (s *Scheduler[P]) markScheduled(b *Batch, now time.Time) {
	mark := func(id SeqID) {
		if g := s.byID[id]; g != nil && g.tl.FirstScheduled.IsZero() {
			g.tl.FirstScheduled = now
		}
	}
	for _, r := range b.Decode {
		mark(r.Seq)
	}
	for _, c := range b.Prefill {
		mark(c.Seq)
	}
}

// failBatch ends every sequence of a failed step.
func (s *Scheduler[P]) failBatch(b *Batch, now time.Time, err error) {
	o, werr := OutcomeFailed, fmt.Errorf("%w: step: %w", ErrExecutor, err)
	if s.life.Err() != nil {
		o, werr = OutcomeCancelled, fmt.Errorf("%w: %w", ErrCancelled, ErrClosed)
	}
	ids := make([]SeqID, 0, len(b.Decode)+len(b.Prefill))
	for _, r := range b.Decode {
		ids = append(ids, r.Seq)
	}
	for _, c := range b.Prefill {
		ids = append(ids, c.Seq)
	}
	for _, id := range ids {
		if g := s.byID[id]; g != nil {
			s.finishGen(g, now, o, fmt.Errorf("sched: request %d: %w", id, werr))
		}
	}
}

// apply advances the sequences of a finished step and streams its tokens.
func (s *Scheduler[P]) apply(b *Batch, res StepResult, now time.Time, exec time.Duration, backlogged, waiting bool) {
	prefill := 0
	var handOff time.Duration
	handOffs := 0
	for _, r := range b.Decode {
		s.byID[r.Seq].prefilled++
	}
	for _, c := range b.Prefill {
		s.byID[c.Seq].prefilled += len(c.Tokens)
		prefill += len(c.Tokens)
	}
	for _, t := range res.Tokens {
		g := s.byID[t.Seq]
		if g == nil || !g.wantToken {
			continue // the executor answered for a row without a token: ignore
		}
		g.wantToken = false
		if t.Stop != FinishNone {
			g.tl.Finish = t.Stop
			s.finishGen(g, now, OutcomeCompleted, nil)
			continue
		}
		g.tokens = append(g.tokens, t.Token)
		g.tl.TokenTimes = append(g.tl.TokenTimes, now)
		if g.tl.FirstToken.IsZero() {
			g.tl.FirstToken = now
		}
		h0 := time.Now()
		g.stream.push(Token{ID: t.Token, Index: len(g.tokens) - g.promptLen - 1, Time: now})
		handOff += time.Since(h0)
		handOffs++
		if g.req.MaxTokens > 0 && len(g.tokens)-g.promptLen >= g.req.MaxTokens {
			g.tl.Finish = FinishLength
			s.finishGen(g, now, OutcomeCompleted, nil)
		}
	}
	// A sequence that needed a token and got none: the executor broke its
	// contract; fail it rather than loop on it forever.
	var missing []*genReq
	for _, g := range s.running {
		if g.wantToken {
			missing = append(missing, g)
		}
	}
	for _, g := range missing {
		g.wantToken = false
		s.finishGen(g, now, OutcomeFailed, fmt.Errorf("sched: request %d: %w: no token sampled", g.id, ErrExecutor))
	}
	cost := s.costOf(b.Model)
	cost.observe(len(b.Decode), prefill, exec)
	s.mu.Lock()
	// The queue's rates are per second of wall time since the last step
	// (the loop's own work, one-shot batches and whatever else the CPU
	// ran meanwhile all delay the queue), and per step time when the loop
	// was idle before this step.
	wall := exec
	if !s.lastStep.IsZero() && backlogged {
		wall = max(now.Sub(s.lastStep), exec)
	}
	s.lastStep = now
	s.mu.stats.HandOffTime += handOff
	s.mu.stats.HandOffs += uint64(handOffs)
	s.observeStepLocked(prefill, len(b.Decode), backlogged, exec, wall, now)
	if waiting {
		// Requests waited after this iteration's admissions: the
		// admissions it made are what the queue's capacity allowed.
		s.observeAdmitsLocked(s.admitted, wall)
	}
	s.admitted = 0
	s.mu.stats.PredictedTPOT = cost.stepAt(max(len(s.running), 1))
	s.mu.stats.Steps++
	s.mu.stats.DecodeTokens += uint64(len(b.Decode))
	s.mu.stats.PrefillTokens += uint64(prefill)
	s.mu.stats.Prefilling = 0
	s.mu.decodeTail, s.mu.decodeLeft, s.mu.decodeMin = 0, 0, 0
	for i, g := range s.running {
		r := g.remainingTokens()
		if i == 0 || r < s.mu.decodeMin {
			s.mu.decodeMin = r
		}
		s.mu.decodeTail = max(s.mu.decodeTail, r)
		s.mu.decodeLeft += r
		s.setBacklogLocked(g, g.pendingPrefill())
		if g.prefilled < len(g.tokens)-1 {
			s.mu.stats.Prefilling++
		}
	}
	s.mu.Unlock()
}
