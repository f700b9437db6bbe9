package sched

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// inferReq is a one-shot request waiting for, or in, a batch.
type inferReq[P any] struct {
	id       uint64
	ctx      context.Context
	stopWake func() bool
	req      InferRequest[P]
	class    Class
	deadline time.Time
	tl       Timeline
	reply    chan inferReply[P] // capacity 1
}

type inferReply[P any] struct {
	out P
	tl  Timeline
	err error
}

// Infer runs a one-shot request through dynamic batching: it waits until its
// model's batch is full or its first member has waited InferMaxDelay, then
// runs at the next step boundary — before the generation step when its class
// is at least that of the highest running sequence, otherwise right after
// it. It blocks until the result; cancelling ctx removes a waiting request
// within one step (a request already in a running batch gets its result).
func (s *Scheduler[P]) Infer(ctx context.Context, req InferRequest[P]) (InferResult[P], error) {
	if err := validateRequest(req.Model, req.Class, req.SLO); err != nil {
		return InferResult[P]{}, err
	}
	now := time.Now()
	class := req.Class.normalize()
	r := &inferReq[P]{
		id: s.nextID.Add(1), ctx: ctx, req: req, class: class,
		reply: make(chan inferReply[P], 1),
	}
	r.tl = Timeline{ID: r.id, Kind: KindInfer, Model: req.Model, Class: class, SLO: req.SLO, FailFast: req.FailFast, Arrived: now, LoadTime: req.LoadTime}
	if req.SLO.Deadline > 0 {
		r.deadline = now.Add(req.SLO.Deadline)
	}

	r.stopWake = context.AfterFunc(ctx, s.signal)
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		r.stopWake()
		return InferResult[P]{}, fmt.Errorf("sched: infer: %w", ErrClosed)
	}
	if _, err := s.refuseLocked(class, req.SLO.TTFT, req.FailFast, s.predictInferLocked(req.Model, class), now); err != nil {
		s.rejectLocked(&r.tl, now, err)
		s.mu.Unlock()
		r.stopWake()
		return InferResult[P]{}, fmt.Errorf("sched: infer: %w", err)
	}
	q := s.mu.infer[req.Model]
	i, _ := slices.BinarySearchFunc(q, r, func(e, t *inferReq[P]) int {
		if e.class != t.class {
			return int(t.class) - int(e.class) // higher class first
		}
		return cmp.Compare(e.id, t.id)
	})
	s.mu.infer[req.Model] = slices.Insert(q, i, r)
	s.mu.inferN[class.index()]++
	s.mu.Unlock()

	s.signal()
	rep := <-r.reply
	if rep.err != nil {
		return InferResult[P]{Timeline: rep.tl}, rep.err
	}
	return InferResult[P]{Output: rep.out, Timeline: rep.tl}, nil
}

// inferBatchLocked takes the next ready one-shot batch whose class is at
// least minClass, or returns nil. A model's queue is ready when it holds a
// full batch, when its oldest member has waited InferMaxDelay, or when the
// scheduler is draining. Among ready models the highest class wins, then the
// oldest request.
func (s *Scheduler[P]) inferBatchLocked(now time.Time, minClass Class) (string, []*inferReq[P]) {
	var (
		best      string
		bestClass Class
		bestID    uint64
	)
	for model, q := range s.mu.infer {
		if len(q) == 0 || q[0].class < minClass {
			continue
		}
		oldest := q[0].tl.Arrived
		for _, r := range q {
			if r.tl.Arrived.Before(oldest) {
				oldest = r.tl.Arrived
			}
		}
		ready := len(q) >= s.cfg.InferMaxBatch || now.Sub(oldest) >= s.cfg.InferMaxDelay || s.mu.closed
		if !ready {
			continue
		}
		if best == "" || q[0].class > bestClass || (q[0].class == bestClass && q[0].id < bestID) {
			best, bestClass, bestID = model, q[0].class, q[0].id
		}
	}
	if best == "" {
		return "", nil
	}
	q := s.mu.infer[best]
	n := min(len(q), s.cfg.InferMaxBatch)
	batch := slices.Clone(q[:n])
	s.mu.infer[best] = slices.Delete(q, 0, n)
	if len(s.mu.infer[best]) == 0 {
		delete(s.mu.infer, best)
	}
	for _, r := range batch {
		s.mu.inferN[r.class.index()]--
	}
	return best, batch
}

// runInfer runs ready one-shot batches of class ≥ minClass, at most limit of
// them, and returns the executor time spent.
func (s *Scheduler[P]) runInfer(minClass Class, limit int) (ran int, exec time.Duration) {
	for ran < limit {
		s.mu.Lock()
		model, batch := s.inferBatchLocked(time.Now(), minClass)
		s.mu.Unlock()
		if batch == nil {
			return ran, exec
		}
		ran++
		inputs := make([]P, len(batch))
		start := time.Now()
		for i, r := range batch {
			inputs[i] = r.req.Input
			r.tl.Admitted, r.tl.FirstScheduled, r.tl.BatchSize = start, start, len(batch)
		}
		outs, err := s.one.Infer(s.life, model, inputs)
		end := time.Now()
		exec += end.Sub(start)
		if err == nil && len(outs) != len(inputs) {
			err = fmt.Errorf("%w: infer %q returned %d outputs for %d inputs", ErrExecutor, model, len(outs), len(inputs))
		} else if err != nil {
			err = fmt.Errorf("%w: infer %q: %w", ErrExecutor, model, err)
		}
		s.mu.Lock()
		s.mu.est.inferTime[model] = ewmaDur(s.mu.est.inferTime[model], end.Sub(start), s.cfg.EWMAAlpha)
		s.mu.stats.InferBatches++
		s.mu.stats.InferItems += uint64(len(batch))
		s.mu.Unlock()
		for i, r := range batch {
			switch {
			case err != nil && s.life.Err() != nil:
				s.finishInfer(r, end, OutcomeCancelled, *new(P), fmt.Errorf("sched: infer %d: %w: %w", r.id, ErrCancelled, ErrClosed))
			case err != nil:
				s.finishInfer(r, end, OutcomeFailed, *new(P), err)
			default:
				r.tl.FirstToken = end
				s.finishInfer(r, end, OutcomeCompleted, outs[i], nil)
			}
		}
	}
	return ran, exec
}

// finishInfer records and answers a one-shot request.
func (s *Scheduler[P]) finishInfer(r *inferReq[P], now time.Time, o Outcome, out P, err error) {
	r.stopWake()
	r.tl.Finished, r.tl.Outcome = now, o
	if err != nil {
		r.tl.Err = err.Error()
	}
	s.mu.Lock()
	s.recordLocked(r.tl)
	s.mu.Unlock()
	r.reply <- inferReply[P]{out: out, tl: r.tl, err: err}
}
