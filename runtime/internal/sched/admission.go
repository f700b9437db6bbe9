package sched

import "time"

// estimates are the measured figures admission predicts from. They are
// exponentially weighted moving averages over step timings, so they follow
// the device as it heats, throttles or changes batch mix.
type estimates struct {
	// prefillRate is prefill tokens per second of step time, measured on
	// every step taken while a prefill backlog existed (steps without prefill
	// then count as zero-rate samples). Because those steps also carry the
	// decode rows, and include the steps where admission had to wait for
	// room, it is the rate at which the backlog actually drains.
	prefillRate float64
	rateKnown   bool
	// prefillSpeed is prefill tokens per second of the steps that carried
	// prefill: what a prompt costs once admitted (prefillRate also counts
	// the steps spent waiting, so it says when the queue drains).
	prefillSpeed float64
	// step is the duration of a step.
	step time.Duration
	// inferTime is the duration of a one-shot batch, per model.
	inferTime map[string]time.Duration
}

func ewma(old, sample, alpha float64) float64 {
	if old == 0 {
		return sample
	}
	return old + alpha*(sample-old)
}

func ewmaDur(old, sample time.Duration, alpha float64) time.Duration {
	return time.Duration(ewma(float64(old), float64(sample), alpha))
}

// observeStepLocked feeds one step's timing into the estimates.
// backlogged tells whether prefill work was waiting when the step began.
func (s *Scheduler[P]) observeStepLocked(prefillTokens int, backlogged bool, d time.Duration) {
	a := s.cfg.EWMAAlpha
	s.mu.est.step = ewmaDur(s.mu.est.step, d, a)
	if prefillTokens > 0 && d > 0 {
		s.mu.est.prefillSpeed = ewma(s.mu.est.prefillSpeed, float64(prefillTokens)/d.Seconds(), a)
	}
	if d <= 0 || !(prefillTokens > 0 || backlogged) {
		return
	}
	sample := float64(prefillTokens) / d.Seconds()
	if !s.mu.est.rateKnown {
		if prefillTokens == 0 {
			return // no throughput seen yet: keep the hint
		}
		s.mu.est.prefillRate, s.mu.est.rateKnown = sample, true
		return
	}
	s.mu.est.prefillRate += a * (sample - s.mu.est.prefillRate)
}

// backlogLocked is the prefill backlog of every class.
func (s *Scheduler[P]) backlogLocked() int {
	n := 0
	for _, b := range s.mu.backlog {
		n += b
	}
	return n
}

// predictTTFTLocked predicts the time to first token of a new request of
// class c with an n-token prompt:
//
//	TTFT ≈ (backlog of classes ≥ c + n) / prefill rate + one step
//
// The backlog counts prefill tokens not yet computed of queued and admitted
// requests of its class and the classes above it (those are served first;
// FIFO puts it behind its own class). The extra step is the one in flight
// when it arrives. Zero when nothing has been measured yet.
func (s *Scheduler[P]) predictTTFTLocked(c Class, n int) time.Duration {
	rate := s.mu.est.prefillRate
	if rate <= 0 {
		return 0
	}
	ahead := n
	for k := c; k <= ClassRealtime; k++ {
		ahead += s.mu.backlog[k.index()]
	}
	return time.Duration(float64(ahead)/rate*float64(time.Second)) + s.mu.est.step
}

// drainEstimateLocked estimates how long until the backlog of classes ≥ c
// has drained: the retry-after of a full queue.
func (s *Scheduler[P]) drainEstimateLocked(c Class) time.Duration {
	return max(s.predictTTFTLocked(c, 0), s.mu.est.step)
}

// predictInferLocked predicts arrived → result for a one-shot request of
// class c: the step in flight, the wait for its batch to form, and one
// batch time for every full batch of its model queued at or above c.
func (s *Scheduler[P]) predictInferLocked(model string, c Class) time.Duration {
	t := s.mu.est.inferTime[model]
	if t == 0 {
		return 0
	}
	ahead := 0
	for _, r := range s.mu.infer[model] {
		if r.class >= c {
			ahead++
		}
	}
	batches := ahead/s.cfg.InferMaxBatch + 1
	return s.mu.est.step + s.cfg.InferMaxDelay + time.Duration(batches)*t
}
