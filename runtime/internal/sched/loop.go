package sched

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"
)

// run is the device loop. Each iteration: drop cancelled and expired
// requests, admit what fits, run one-shot batches that outrank the
// generation work, run one generation step, then at most one lower-class
// one-shot batch (so neither kind starves the other). It sleeps only when
// there is nothing to do.
func (s *Scheduler[P]) run() {
	defer close(s.loopDone)
	maint, _ := s.dec.(Maintainer)
	var maintained time.Time
	for {
		start := time.Now()
		s.reap(start)
		if s.life.Err() != nil {
			s.cancelAll()
			return
		}
		s.admit()

		top := ClassUnset // no generation work: any one-shot class may run
		if len(s.running) > 0 {
			top = s.topClass()
		}
		n1, ex1 := s.runInfer(top, 1<<30)
		stepped, exStep := s.step()
		n2, ex2 := s.runInfer(ClassUnset, 1)

		if stepped {
			loop := time.Since(start)
			exec := ex1 + exStep + ex2
			s.mu.Lock()
			s.mu.stats.LoopTime += loop
			s.mu.stats.ExecTime += exec
			s.mu.stats.LastOverhead = loop - exec
			s.mu.Unlock()
		}
		if stepped || n1 > 0 || n2 > 0 {
			yieldAfterStep()
			if maint != nil && time.Since(maintained) >= MaintainEvery {
				maintained = time.Now()
				maint.Maintain(maintained)
			}
			continue
		}
		if maint != nil {
			maintained = time.Now()
			maint.Maintain(maintained)
		}
		if s.idle() {
			return
		}
	}
}

// yieldAfterStep passes the loop through Go's scheduler once an iteration
// that ran the executor (a step or a one-shot batch).
// Why: a goroutine that calls into ONNX Runtime back to back is never
// rescheduled, and the runtime's monitor (sysmon) counts a P whose
// goroutine has not been rescheduled for 10 ms as hogging it: it takes the
// P away in the middle of a step, preempts the goroutine when the step
// returns, and, having taken a P, goes back to waking every 20 µs instead
// of backing off towards 10 ms. On a two-core board each of its wake-ups
// lands on a core that is running the step's kernels. A yield when
// nothing else is runnable costs about a microsecond, and the monitor no
// longer takes the P for hogging. It still wakes in bursts of some fifty
// polls at its shortest period: after each P it takes back from a call
// (the loop's, where another goroutine ran beside a step) and after a
// call that began while it slept with every P idle (the loop's first step
// after waiting for work). The loop is not locked to its OS thread: a
// locked goroutine's yield (and each of those forced preemptions) hands
// the P to another thread and back, two thread wake-ups. runtime/engine's
// BenchmarkBatch1VsBare and BenchmarkBatchScaling, run under `perf stat -e
// context-switches` or `perf sched record`, show both: the context
// switches, and the monitor thread's wake-ups while the engine decodes
// against those while the bare loop, which yields the same way with
// nothing beside it, runs (several times as many, with one to four Ps).
func yieldAfterStep() { runtime.Gosched() }

// topClass is the highest class among running sequences.
func (s *Scheduler[P]) topClass() Class {
	c := ClassUnset
	for _, g := range s.running {
		c = max(c, g.class)
	}
	return c
}

// idle waits for a submission, a cancellation, Close, or the next timer
// (a one-shot batch's delay or a waiting request's deadline). It reports
// whether the loop should exit: closed and nothing left.
func (s *Scheduler[P]) idle() (exit bool) {
	s.mu.Lock()
	if s.mu.closed && s.emptyLocked() {
		s.mu.Unlock()
		return true
	}
	next := s.nextTimerLocked()
	s.mu.Unlock()
	var timer <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-s.wake:
	case <-timer:
	case <-s.life.Done():
	}
	return false
}

func (s *Scheduler[P]) emptyLocked() bool {
	if len(s.running) > 0 || len(s.mu.infer) > 0 {
		return false
	}
	for _, q := range s.mu.queue {
		if len(q) > 0 {
			return false
		}
	}
	return true
}

// nextTimerLocked is the earliest time the loop must look again on its own.
func (s *Scheduler[P]) nextTimerLocked() time.Time {
	var next time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, q := range s.mu.infer {
		for _, r := range q {
			earlier(r.tl.Arrived.Add(s.cfg.InferMaxDelay))
			earlier(r.deadline)
		}
	}
	for _, q := range s.mu.queue {
		for _, g := range q {
			earlier(g.deadline)
		}
	}
	return next
}

// endReason classifies why a request must leave now, or returns ok=false.
func endReason(ctx context.Context, deadline, now time.Time) (Outcome, error, bool) {
	if err := ctx.Err(); err != nil {
		if errors.Is(context.Cause(ctx), errStopped) {
			return OutcomeCompleted, nil, true
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return OutcomeTimedOut, fmt.Errorf("%w: %w", ErrTimeout, err), true
		}
		return OutcomeCancelled, fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx)), true
	}
	if !deadline.IsZero() && !now.Before(deadline) {
		return OutcomeTimedOut, fmt.Errorf("%w: slo deadline passed", ErrTimeout), true
	}
	return 0, nil, false
}

// reap removes cancelled and expired requests, waiting or running.
func (s *Scheduler[P]) reap(now time.Time) {
	type gone struct {
		g   *genReq
		r   *inferReq[P]
		o   Outcome
		err error
	}
	var out []gone
	s.mu.Lock()
	for i := range s.mu.queue {
		s.mu.queue[i] = slices.DeleteFunc(s.mu.queue[i], func(g *genReq) bool {
			o, err, end := endReason(g.ctx, g.deadline, now)
			if !end {
				if err = s.expiredLocked(g, now); err != nil {
					o, end = OutcomeRejected, true
					g.tl.RefusedInQueue = true
				}
			}
			if end {
				out = append(out, gone{g: g, o: o, err: err})
			}
			return end
		})
	}
	for model, q := range s.mu.infer {
		q = slices.DeleteFunc(q, func(r *inferReq[P]) bool {
			o, err, end := endReason(r.ctx, r.deadline, now)
			if end {
				out = append(out, gone{r: r, o: o, err: err})
				s.mu.inferN[r.class.index()]--
			}
			return end
		})
		if len(q) == 0 {
			delete(s.mu.infer, model)
		} else {
			s.mu.infer[model] = q
		}
	}
	s.mu.Unlock()
	for _, g := range s.running {
		if o, err, end := endReason(g.ctx, g.deadline, now); end {
			out = append(out, gone{g: g, o: o, err: err})
		}
	}
	for _, x := range out {
		if x.r != nil {
			s.finishInfer(x.r, now, x.o, *new(P), fmt.Errorf("sched: infer %d: %w", x.r.id, x.err))
		} else if x.err == nil {
			x.g.tl.Finish = FinishStopString
			s.finishGen(x.g, now, x.o, nil) // stopped by the caller: completed
		} else {
			s.finishGen(x.g, now, x.o, fmt.Errorf("sched: request %d: %w", x.g.id, x.err))
		}
	}
}

// expiredLocked refuses a waiting fail-fast request that can no longer
// meet its TTFT objective. Fail-fast asks to be refused rather than kept
// waiting past the objective: its prediction at arrival said it would fit,
// the queue moved slower than predicted, and it is refused as soon as it
// cannot (its client gets the same *OverloadError, later), rather than
// waiting behind the on-time requests it now yields to (headLocked) for as
// long as they keep arriving.
func (s *Scheduler[P]) expiredLocked(g *genReq, now time.Time) error {
	if !g.req.FailFast || g.probe || g.admitted || !g.tl.FirstScheduled.IsZero() || g.req.SLO.TTFT <= 0 {
		return nil
	}
	// Late even at its solo cost (the optimistic estimate): an estimate
	// that errs towards refusing here would refuse on an idle device too,
	// where nothing but this check stands between the request and a step.
	own, ok := s.soloCostLocked(g.pendingPrefill())
	if !ok || !now.Add(own).After(g.tl.Arrived.Add(g.req.SLO.TTFT)) {
		return nil
	}
	p := s.predictTTFTLocked(g.class, g.pendingPrefill(), now)
	return &OverloadError{Class: g.class.String(), Predicted: now.Sub(g.tl.Arrived) + p.Own, SLO: g.req.SLO.TTFT, Late: true,
		RetryAfter: s.retryAfterLocked(p, g.req.SLO.TTFT, now)}
}

// cancelAll ends everything with outcome cancelled; Close ran out of time.
func (s *Scheduler[P]) cancelAll() {
	now := time.Now()
	err := fmt.Errorf("%w: %w", ErrCancelled, ErrClosed)
	s.mu.Lock()
	var gs []*genReq
	for i := range s.mu.queue {
		gs = append(gs, s.mu.queue[i]...)
		s.mu.queue[i] = nil
	}
	var rs []*inferReq[P]
	for model, q := range s.mu.infer {
		rs = append(rs, q...)
		delete(s.mu.infer, model)
	}
	s.mu.inferN = [numClasses]int{}
	s.mu.Unlock()
	gs = append(gs, s.running...)
	for _, g := range gs {
		s.finishGen(g, now, OutcomeCancelled, fmt.Errorf("sched: request %d: %w", g.id, err))
	}
	for _, r := range rs {
		s.finishInfer(r, now, OutcomeCancelled, *new(P), fmt.Errorf("sched: infer %d: %w", r.id, err))
	}
}

// admit moves waiting requests into the running set, highest class first and
// FIFO within a class (a request already too late for its TTFT objective
// yields, see headLocked), while MaxBatch, the KV cache and the TPOT rule
// allow. A waiting request that outranks running ones may preempt them
// (lowest class, most recently admitted first). Admission stops at the
// first request that does not fit, so later or lower requests never
// overtake it.
func (s *Scheduler[P]) admit() {
	for {
		s.mu.Lock()
		g := s.headLocked()
		s.mu.Unlock()
		if g == nil {
			return
		}
		if len(s.running) >= s.cfg.MaxBatch {
			if !s.preemptFor(g) {
				return
			}
			continue
		}
		if s.lastSlot(g) {
			return // kept for a request that can still be on time
		}
		if !s.tpotRoom(g) {
			if s.preemptFor(g) {
				continue
			}
			if !g.tpotDeferred {
				g.tpotDeferred = true
				s.mu.Lock()
				s.mu.stats.TPOTDeferred++
				s.mu.Unlock()
			}
			return // wait for a running stream to finish
		}
		cached, err := s.dec.Admit(s.life, Sequence{
			ID: g.id, Model: g.req.Model, Tokens: g.tokens, PromptLen: g.promptLen,
			Reserve: s.cfg.AdmitReserve, Sampling: g.req.Sampling, Attach: g.req.Attach,
		})
		if errors.Is(err, ErrNoCapacity) {
			if s.preemptFor(g) {
				continue
			}
			if len(s.running) > 0 {
				return // wait for running sequences to free KV
			}
		}
		s.mu.Lock()
		q := &s.mu.queue[g.class.index()]
		*q = slices.DeleteFunc(*q, func(e *genReq) bool { return e == g })
		s.mu.Unlock()
		if err != nil {
			// Nothing else holds KV, so it can never fit; or another failure.
			s.finishGen(g, time.Now(), OutcomeFailed, fmt.Errorf("sched: request %d: admit: %w", g.id, err))
			continue
		}
		cached = min(max(cached, 0), len(g.tokens)-1)
		now := time.Now()
		s.mu.Lock()
		g.late = s.lateLocked(g, now)
		s.mu.Unlock()
		if g.tl.Admitted.IsZero() {
			g.tl.Admitted = now
			g.tl.CachedTokens = cached
		}
		s.admitSeq++
		s.admitted++
		g.admitted, g.admitOrder = true, s.admitSeq
		g.reserved, g.prefilled = len(g.tokens), cached
		s.running = append(s.running, g)
		s.byID[g.id] = g
		s.mu.Lock()
		s.setBacklogLocked(g, g.pendingPrefill())
		s.mu.stats.CachedTokens += uint64(cached)
		s.mu.stats.Running = len(s.running)
		s.changedLocked()
		s.mu.Unlock()
	}
}

// lastSlot reports whether g is late (headLocked found no waiting
// request of its class that can still be on time) and would take the last
// free slot of the batch. That slot stays free: a request arriving now
// that can still meet its objective then starts at the next step instead
// of waiting for a late stream to finish — after a burst the late backlog
// drains on the other slots while new requests see the device as before
// (TestLateBacklogKeepsASlot). It costs the backlog one slot of
// throughput, and only while it is late.
func (s *Scheduler[P]) lastSlot(g *genReq) bool {
	if s.cfg.MaxBatch < 2 || len(s.running) < s.cfg.MaxBatch-1 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lateLocked(g, time.Now())
}

// headLocked is the next waiting request to admit: in the highest
// non-empty class, the first that can still meet its TTFT objective, or the
// first of all when none can (see lateLocked). With Config.StrictFIFO, the
// first of the class.
func (s *Scheduler[P]) headLocked() *genReq {
	for _, c := range Classes {
		q := s.mu.queue[c.index()]
		if len(q) == 0 {
			continue
		}
		if s.cfg.StrictFIFO {
			return q[0]
		}
		now := time.Now()
		for _, g := range q {
			if !s.lateLocked(g, now) {
				return g
			}
		}
		return q[0]
	}
	return nil
}

// lateLocked reports whether g can no longer meet its TTFT objective: even
// admitted now, its prefill at the measured prefill speed would end past
// arrival + SLO.TTFT. Under overload, serving such a request first makes the ones
// behind it late too and buys nothing — it has missed already — so it yields
// to the first request behind it that can still be on time (goodput counts
// only requests within their SLO). It is served as soon as no such request
// waits in its class; a Deadline bounds how long that can take.
func (s *Scheduler[P]) lateLocked(g *genReq, now time.Time) bool {
	if g.late {
		return true // admitted late once: a preemption does not make it on time
	}
	if g.req.SLO.TTFT <= 0 || g.probe || s.mu.est.prefillSpeed <= 0 || !g.tl.FirstToken.IsZero() {
		return false // no objective, a probe, nothing measured, or a preempted stream whose TTFT is history
	}
	return now.Add(prefillTime(g, s.mu.est.prefillSpeed)).After(g.tl.Arrived.Add(g.req.SLO.TTFT))
}

// victim is the running sequence to preempt: lowest class, then most
// recently admitted (it has the least work invested and the latest claim).
func (s *Scheduler[P]) victim() *genReq {
	var v *genReq
	for _, g := range s.running {
		if v == nil || g.class < v.class || (g.class == v.class && g.admitOrder > v.admitOrder) {
			v = g
		}
	}
	return v
}

// preemptFor preempts a running sequence of a lower class than g, if
// priority preemption is on and there is one; else, when g can still meet
// its TTFT objective, a running sequence of its class or lower that was
// admitted late (lateVictim).
func (s *Scheduler[P]) preemptFor(g *genReq) bool {
	if s.cfg.NoPriorityPreemption {
		return false
	}
	if v := s.victim(); v != nil && v.class < g.class {
		s.preempt(v, "priority")
		return true
	}
	if s.cfg.StrictFIFO {
		return false // late requests do not yield: the first in line is served
	}
	s.mu.Lock()
	late := s.lateLocked(g, time.Now())
	s.mu.Unlock()
	if late {
		return false
	}
	if v := s.lateVictim(g); v != nil {
		s.preempt(v, "late")
		return true
	}
	return false
}

// lateVictim is the running sequence admitted late to preempt for g, a
// request that can still be on time: lowest class (at most g's), then most
// recently admitted. A late stream has missed its objective already; a
// request arriving after a burst must not miss its own waiting for the
// backlog's streams to end, which at a decode step per token is many times
// its TTFT objective (the recovery phase of the overload profile, and
// TestOnTimeRequestPreemptsLateStream). The late stream goes back to the
// queue, where it yields again, with its tokens kept.
func (s *Scheduler[P]) lateVictim(g *genReq) *genReq {
	var v *genReq
	for _, r := range s.running {
		if !r.late || r.class > g.class {
			continue
		}
		if v == nil || r.class < v.class || (r.class == v.class && r.admitOrder > v.admitOrder) {
			v = r
		}
	}
	return v
}

// preempt takes a running sequence's KV back and queues it again. Its tokens
// (prompt and generated so far) are kept; on re-admission they are
// recomputed as one prompt, so greedy output continues unchanged.
func (s *Scheduler[P]) preempt(g *genReq, why string) {
	s.dec.Release(g.id)
	s.removeRunning(g)
	g.admitted, g.reserved, g.prefilled, g.wantToken = false, 0, 0, false
	g.tl.Preemptions++
	s.log.Debug("sched: preempt", "seq", g.id, "class", g.class, "tokens", len(g.tokens), "why", why)
	s.mu.Lock()
	s.mu.stats.Preemptions++
	s.mu.stats.Running = len(s.running)
	s.setBacklogLocked(g, len(g.tokens))
	s.enqueueLocked(g)
	s.mu.Unlock()
}

func (s *Scheduler[P]) removeRunning(g *genReq) {
	s.running = slices.DeleteFunc(s.running, func(e *genReq) bool { return e == g })
	delete(s.byID, g.id)
}

// finishGen ends a generation request: frees its KV, stamps and records its
// timeline, and closes its stream. g must no longer be in a queue.
func (s *Scheduler[P]) finishGen(g *genReq, now time.Time, o Outcome, err error) {
	if g.admitted {
		s.dec.Release(g.id)
		g.admitted = false
		s.removeRunning(g)
	}
	g.stopWake()
	g.tl.Finished, g.tl.Outcome = now, o
	if g.tl.Finish == FinishNone {
		g.tl.Finish = finishOf(o)
	}
	if err != nil {
		g.tl.Err = err.Error()
	}
	s.mu.Lock()
	s.setBacklogLocked(g, 0)
	s.mu.stats.Running = len(s.running)
	s.recordLocked(g.tl)
	s.changedLocked()
	s.mu.Unlock()
	s.log.Debug("sched: finished", "seq", g.id, "outcome", o, "tokens", len(g.tl.TokenTimes))
	// OnFinish before the stream ends: a caller that has seen its stream
	// end finds what OnFinish released already released (the engine's
	// hold on the model, whose keep-alive a listing then shows).
	if g.req.OnFinish != nil {
		g.req.OnFinish()
	}
	g.stream.finish(g.tl, err)
}
