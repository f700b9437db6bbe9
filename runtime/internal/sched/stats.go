package sched

import "time"

// Stats is a snapshot of the scheduler's state and counters, cheap to take
// (one lock, no allocation beyond the struct).
type Stats struct {
	// Queued is the number of waiting generation requests per class
	// (indexed by Class−1: batch, interactive, realtime); QueuedInfer the
	// waiting one-shot requests per class.
	Queued      [numClasses]int
	QueuedInfer [numClasses]int
	// Running is the number of admitted sequences (holding KV); Prefilling
	// how many of them still have prompt to compute.
	Running    int
	Prefilling int
	// Steps counts executor steps; DecodeTokens and PrefillTokens the tokens
	// they computed; CachedTokens prompt tokens skipped by prefix hits.
	Steps         uint64
	DecodeTokens  uint64
	PrefillTokens uint64
	CachedTokens  uint64
	// InferBatches and InferItems count one-shot batches and requests run.
	InferBatches uint64
	InferItems   uint64
	// Preemptions counts sequences whose KV was taken back.
	Preemptions uint64
	// Outcome counters, one per finished request.
	Completed, Cancelled, Rejected, TimedOut, Failed uint64
	// ExecTime is the time spent inside Executor.Step and Executor.Infer
	// during loop iterations that ran a step; LoopTime the whole of those
	// iterations. Overhead() is the share outside the executor.
	ExecTime time.Duration
	LoopTime time.Duration
	// LastOverhead is the scheduler's own time in the last step iteration.
	LastOverhead time.Duration
	// HandOffTime is the part of LoopTime − ExecTime the loop spent handing
	// sampled tokens to their streams: a token wakes the goroutine that
	// reads its stream, which the Go runtime may run on another OS thread it
	// wakes for it first (with GOMAXPROCS above 1 and a P idle), on a core
	// that is running the step's kernels. HandOffs counts those tokens.
	HandOffTime time.Duration
	HandOffs    uint64
	// PrefillRate (tokens/s) and StepTime are the current estimates used by
	// admission.
	PrefillRate float64
	StepTime    time.Duration
	// PrefillSpeed and SoloPrefillSpeed (tokens/s) are what a prompt costs
	// once admitted beside decoding streams, and on an idle device.
	PrefillSpeed     float64
	SoloPrefillSpeed float64
	// Probes counts fail-fast requests admitted on an idle device although
	// their own predicted cost was over their objective, to measure the
	// device again (see probeEvery).
	Probes uint64
	// PredictedTPOT is the learnt cost model's time per output token at the
	// current number of running sequences (decode cost plus prefill share);
	// TPOTDeferred counts admissions postponed because one more row would
	// have put the running streams over their TPOT objective.
	PredictedTPOT time.Duration
	TPOTDeferred  uint64
	// RecordsDropped counts timelines dropped because Records was not called
	// before MaxRecords accumulated.
	RecordsDropped uint64
}

// QueuedIn returns the generation queue depth of class c.
func (st Stats) QueuedIn(c Class) int {
	c = c.normalize()
	if !c.valid() {
		return 0
	}
	return st.Queued[c.index()]
}

// Overhead is the scheduler's share of step iterations:
// (LoopTime − ExecTime) / LoopTime; zero before any step.
func (st Stats) Overhead() float64 {
	if st.LoopTime <= 0 {
		return 0
	}
	return float64(st.LoopTime-st.ExecTime) / float64(st.LoopTime)
}

// Stats returns a snapshot. Safe for concurrent use.
func (s *Scheduler[P]) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.stats
	for i := range numClasses {
		st.Queued[i] = len(s.mu.queue[i])
		st.QueuedInfer[i] = s.mu.inferN[i]
	}
	st.PrefillRate = s.mu.est.prefillRate
	st.StepTime = s.mu.est.step
	st.PrefillSpeed = s.mu.est.prefillSpeed
	st.SoloPrefillSpeed = s.mu.est.soloSpeed
	st.RecordsDropped = s.mu.dropped
	return st
}
