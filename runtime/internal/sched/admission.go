package sched

import (
	"math"
	"time"
)

// estimates are the measured figures admission predicts from: moving
// averages and windows over the last steps, so they follow the device as
// it heats, throttles or changes batch mix.
//
// Admission must never lock itself out: a fail-fast request refused is a
// request that teaches the estimates nothing, so an estimate learnt under a
// burst and never revised would refuse the same request on an idle device
// forever. Hence the split below: what the queue ahead costs is predicted
// from the queue as it is now and from rates whose evidence ages
// (drainRateLocked); what the request itself costs is predicted from the
// solo prefill steps of an idle device, erring fast (soloCostLocked); and a
// request whose own cost alone is over its objective on an idle device is
// still admitted now and then as a probe, so a stale estimate is measured
// again (probeEvery).
type estimates struct {
	// prefillRate is prefill tokens per second of wall time over the last
	// drainSteps steps taken while a prefill backlog existed (steps without
	// prefill count with zero tokens). Because those steps also carry the
	// decode rows, and include the steps where admission had to wait for
	// room, it is the rate at which the backlog actually drains. A window,
	// not a per-step EWMA: under a burst the prefill arrives in lumps (a
	// slot frees, a prompt fills a step, then decode-only steps), and a
	// short EWMA of such a series swings by multiples from step to step.
	prefillRate float64
	rateKnown   bool
	drain       drainWindow
	// rateAt is when the last backlogged step fed prefillRate: the rate's
	// evidence ages from then (see drainRateLocked).
	rateAt time.Time
	// prefillSpeed is prefill tokens per second of the steps that carried
	// prefill: what a prompt costs once admitted beside decoding streams
	// (prefillRate also counts the steps spent waiting, so it says when the
	// queue drains).
	prefillSpeed float64
	// solo holds the last soloSamples steps that carried prefill and no
	// decode row: what a prompt costs on an idle device (soloCostLocked).
	solo     [soloSamples]soloStep
	soloNext int
	// soloSpeed is the fastest of them in tokens/s (for Stats).
	soloSpeed float64
	// admitRate is requests admitted per second over the last drainSteps
	// steps taken while requests still waited after admission: how fast
	// the queue moves when slots or KV, not prefill, are what it waits for.
	admitRate float64
	admits    admitWindow
	// step is the duration of a step; minStep the shortest step ever
	// measured, which no request's first token can beat (so no probe is
	// spent on an objective below it).
	step, minStep time.Duration
	// inferTime is the duration of a one-shot batch, per model.
	inferTime map[string]time.Duration
}

// drainMemory is how fast the drain rate's evidence fades once no
// backlogged step has fed it: after one drainMemory the queue ahead is
// predicted to drain 63 % of the way from the rate measured then towards the
// prefill speed. The waits that slowed the drain (KV full, TPOT deferrals)
// belonged to the load of that time; a queue forming seconds later meets
// the device as it is now. Two seconds is many steps of any model this
// scheduler serves (TestAdmissionRecoversAfterBurst measures the recovery).
const drainMemory = 2 * time.Second

// probeEvery spaces the probes: on an idle device, a fail-fast request
// whose own predicted cost alone is over its objective is admitted at most
// once per probeEvery, so that a speed learnt under other load is measured
// again rather than refusing that request forever. Refused requests in
// between are told to retry when the next probe is due.
const probeEvery = time.Second

// soloSamples is how many solo prefill steps soloCostLocked remembers.
const soloSamples = 8

// soloStep is one solo prefill step: tokens computed, time taken.
type soloStep struct {
	tokens int
	d      time.Duration
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

// observeStepLocked feeds one step's timing into the estimates: prefill
// tokens and decode rows it carried, whether prefill work was waiting when
// it began, how long it took and when it ended.
//
// d is the step's own time, which the speeds and the step estimate use;
// wall the time since the previous step ended, which the drain rate uses.
func (s *Scheduler[P]) observeStepLocked(prefillTokens, decodeRows int, backlogged bool, d, wall time.Duration, now time.Time) {
	a := s.cfg.EWMAAlpha
	s.mu.est.step = ewmaDur(s.mu.est.step, d, a)
	if d > 0 && (s.mu.est.minStep == 0 || d < s.mu.est.minStep) {
		s.mu.est.minStep = d
	}
	if prefillTokens > 0 && d > 0 {
		speed := float64(prefillTokens) / d.Seconds()
		s.mu.est.prefillSpeed = ewma(s.mu.est.prefillSpeed, speed, a)
		if decodeRows == 0 {
			e := &s.mu.est
			e.solo[e.soloNext%soloSamples] = soloStep{prefillTokens, d}
			e.soloNext++
			e.soloSpeed = 0
			for _, x := range e.solo {
				if x.d > 0 {
					e.soloSpeed = max(e.soloSpeed, float64(x.tokens)/x.d.Seconds())
				}
			}
		}
	}
	if d <= 0 || !(prefillTokens > 0 || backlogged) {
		return
	}
	if !s.mu.est.rateKnown && prefillTokens == 0 {
		return // no throughput seen yet: keep the hint
	}
	s.mu.est.prefillRate = s.mu.est.drain.add(prefillTokens, wall)
	s.mu.est.rateKnown, s.mu.est.rateAt = true, now
}

// observeAdmitsLocked feeds one step that began with requests still
// waiting after admission: admitted requests were let in during its loop
// iteration, which took d.
func (s *Scheduler[P]) observeAdmitsLocked(admitted int, d time.Duration) {
	if d > 0 {
		s.mu.est.admitRate = s.mu.est.admits.add(admitted, d)
	}
}

// drainSteps is how many backlogged steps the drain rate is measured over.
const drainSteps = 64

// admitWindow is the same window over admissions.
type admitWindow = drainWindow

// drainWindow holds the last drainSteps steps' counts (prefill tokens, or
// admissions) and durations, with their sums.
type drainWindow struct {
	tokens [drainSteps]int
	dur    [drainSteps]time.Duration
	next   int
	sumTok int
	sumDur time.Duration
}

// add records one step and returns the window's rate in tokens/s.
func (w *drainWindow) add(tokens int, d time.Duration) float64 {
	i := w.next % drainSteps
	w.sumTok += tokens - w.tokens[i]
	w.sumDur += d - w.dur[i]
	w.tokens[i], w.dur[i] = tokens, d
	w.next++
	if w.sumDur <= 0 {
		return 0
	}
	return float64(w.sumTok) / w.sumDur.Seconds()
}

// backlogLocked is the prefill backlog of every class.
func (s *Scheduler[P]) backlogLocked() int {
	n := 0
	for _, b := range s.mu.backlog {
		n += b
	}
	return n
}

// busyLocked reports whether the device has work: admitted sequences,
// prefill waiting, or one-shot requests queued.
func (s *Scheduler[P]) busyLocked() bool {
	return s.mu.stats.Running > 0 || s.backlogLocked() > 0 || len(s.mu.infer) > 0
}

// drainRateLocked is the rate (tokens/s) at which a prefill backlog is
// predicted to drain now: the measured drain rate, moved towards the
// prefill speed as its evidence ages (drainMemory); the hint before
// anything was measured; 0 when nothing is known at all.
func (s *Scheduler[P]) drainRateLocked(now time.Time) float64 {
	e := &s.mu.est
	if !e.rateKnown {
		return e.prefillRate
	}
	speed := max(e.prefillSpeed, e.prefillRate)
	age := now.Sub(e.rateAt)
	if age <= 0 {
		return e.prefillRate
	}
	w := math.Exp(-age.Seconds() / drainMemory.Seconds())
	return w*e.prefillRate + (1-w)*speed
}

// soloCostLocked predicts how long n prompt tokens take on an idle device,
// from the last solo prefill steps: the lower envelope of what they took —
// a step that computed at least n tokens bounds it, and a smaller one is
// extended at the fastest speed seen — so one cold or delayed step does not
// hold it up, and steps that computed a few tokens (a prefix-cache hit
// leaves one) say what a step's fixed cost is rather than that tokens are
// slow. It errs towards the fast side on purpose: on an idle device a
// request admitted on an optimistic prediction is measured, and its step
// corrects the estimate; one refused on a pessimistic one measures nothing
// (the probes of refuseLocked are the backstop). ok=false when no solo
// step was measured.
func (s *Scheduler[P]) soloCostLocked(n int) (cost time.Duration, ok bool) {
	e := &s.mu.est
	if e.soloSpeed <= 0 {
		return 0, false
	}
	best := time.Duration(math.MaxInt64)
	for _, x := range e.solo {
		if x.d <= 0 {
			continue
		}
		c := x.d
		if n > x.tokens {
			c += perSecond(n-x.tokens, e.soloSpeed)
		}
		best = min(best, c)
	}
	return best, true
}

// ownCostLocked predicts a new n-token prompt's own time to its first
// token: on an idle device its solo cost; on a busy one the solo cost plus
// one step (its first token comes out of a step that also carries the
// decode rows; the step in flight is the wait's). Without solo steps it
// falls back to the prefill speed of steps beside decoding streams, then to
// the drain rate; ok=false when nothing is known.
func (s *Scheduler[P]) ownCostLocked(n int, busy bool, now time.Time) (time.Duration, bool) {
	c, ok := s.soloCostLocked(n)
	if !ok {
		speed := s.mu.est.prefillSpeed
		if speed <= 0 {
			speed = s.drainRateLocked(now)
		}
		if speed <= 0 {
			return 0, false
		}
		c = perSecond(n, speed)
	}
	if busy {
		c += s.mu.est.step
	}
	return c, true
}

// prediction is a predicted latency in its two parts: Wait drains as the
// device works (the queue ahead and the step in flight); Own is the request's
// own work, which no waiting shortens. Idle marks a device with no work at all.
type prediction struct {
	Wait, Own time.Duration
	Idle      bool
	// IdleOwn is Own on an idle device (the solo prefill speed): what the
	// request costs once everything ahead of it and beside it has finished.
	IdleOwn time.Duration
	// Fixed is the part of Own that no probe can revise: a one-shot
	// batch's InferMaxDelay (configuration), a generation's shortest step
	// ever measured (none was faster).
	Fixed time.Duration
}

// Total is the predicted latency; zero when nothing was measured.
func (p prediction) Total() time.Duration { return p.Wait + p.Own }

func perSecond(tokens int, rate float64) time.Duration {
	return time.Duration(float64(tokens) / rate * float64(time.Second))
}

// predictTTFTLocked predicts the time to first token of a new request of
// class c with an n-token prompt, from the queue as it is now:
//
//	busy: TTFT ≈ step in flight + max(tokens ahead / drain rate, requests ahead / admission rate) + one step + solo cost(n)
//	idle: TTFT ≈ solo cost(n)
//
// What is ahead is what headLocked will serve first: the admitted
// requests' prompts not yet computed, every request queued in a higher
// class, and those of its own class that can still meet their TTFT
// objective (a request already late yields to one that can be on time, so
// a backlog of late requests does not stand in front of a new one). The
// request itself needs a slot too when the batch is full. Zero when
// nothing has been measured.
func (s *Scheduler[P]) predictTTFTLocked(c Class, n int, now time.Time) prediction {
	busy := s.busyLocked()
	own, ok := s.ownCostLocked(n, busy, now)
	if !ok {
		return prediction{Idle: !busy}
	}
	p := prediction{Own: own, Idle: !busy, Fixed: s.mu.est.minStep}
	p.IdleOwn = p.Own
	if !busy {
		return p
	}
	p.IdleOwn, _ = s.ownCostLocked(n, false, now)
	tokens, requests := s.aheadLocked(c, now)
	var wait time.Duration
	if rate := s.drainRateLocked(now); tokens > 0 && rate > 0 {
		wait = perSecond(tokens, rate)
	}
	switch full := s.mu.stats.Running >= s.cfg.MaxBatch; {
	case requests > 0 && s.mu.est.admitRate > 0:
		if full {
			requests++
		}
		wait = max(wait, perSecond(requests, s.mu.est.admitRate))
	case full:
		// Nothing queued ahead, but every slot taken: the first slot
		// frees when the running stream nearest its end finishes.
		wait = max(wait, time.Duration(s.mu.decodeMin)*s.mu.est.step)
	}
	p.Wait = s.mu.est.step + wait
	return p
}

// aheadLocked counts the prefill tokens and the queued requests that a new
// on-time request of class c would wait for (see predictTTFTLocked).
func (s *Scheduler[P]) aheadLocked(c Class, now time.Time) (tokens, requests int) {
	for k := c; k <= ClassRealtime; k++ {
		queued := 0
		for _, g := range s.mu.queue[k.index()] {
			queued += g.backlog
			if k > c || !s.lateLocked(g, now) {
				tokens += g.backlog
				requests++
			}
		}
		tokens += s.mu.backlog[k.index()] - queued // admitted, still prefilling
	}
	return tokens, requests
}

// drainEstimateLocked estimates how long until the backlog of classes ≥ c
// has drained: the retry-after of a full queue.
func (s *Scheduler[P]) drainEstimateLocked(c Class, now time.Time) time.Duration {
	return max(s.predictTTFTLocked(c, 0, now).Wait, s.mu.est.step)
}

// predictInferLocked predicts arrived → result for a one-shot request of
// class c: the step in flight (when the device is busy), the wait for its
// batch to form, and one batch time for every full batch of its model
// queued at or above c (its own batch is Own).
func (s *Scheduler[P]) predictInferLocked(model string, c Class) prediction {
	busy := s.busyLocked()
	t := s.mu.est.inferTime[model]
	if t == 0 {
		return prediction{Idle: !busy}
	}
	ahead := 0
	for _, r := range s.mu.infer[model] {
		if r.class >= c {
			ahead++
		}
	}
	p := prediction{Own: s.cfg.InferMaxDelay + t, Idle: !busy, Fixed: s.cfg.InferMaxDelay}
	p.IdleOwn = p.Own
	if busy {
		p.Wait = s.mu.est.step + time.Duration(ahead/s.cfg.InferMaxBatch)*t
	}
	return p
}

// untilIdleLocked estimates how long until the device has no work if
// nothing else arrives: the prefill backlog drained, then the generation
// left (running and queued) decoded at the step time, MaxBatch rows a step
// and never faster than the longest single tail.
func (s *Scheduler[P]) untilIdleLocked(now time.Time) time.Duration {
	d := s.mu.est.step
	if rate := s.drainRateLocked(now); rate > 0 {
		d += perSecond(s.backlogLocked(), rate)
	}
	tail, total := s.mu.decodeTail, s.mu.decodeLeft
	for _, q := range s.mu.queue {
		for _, g := range q {
			r := g.remainingTokens()
			tail, total = max(tail, r), total+r
		}
	}
	steps := max(tail, (total+s.cfg.MaxBatch-1)/s.cfg.MaxBatch)
	d += time.Duration(steps) * s.mu.est.step
	for model, q := range s.mu.infer {
		d += time.Duration(len(q)/s.cfg.InferMaxBatch+1) * s.mu.est.inferTime[model]
	}
	return d
}

// remainingTokens is how many tokens g may still generate (assumedRemaining
// for a request without MaxTokens).
func (g *genReq) remainingTokens() int {
	if g.req.MaxTokens <= 0 {
		return assumedRemaining
	}
	return max(g.req.MaxTokens-(len(g.tokens)-g.promptLen), 0)
}

// refuseLocked applies the queue bound and the fail-fast objective to a
// request of class c predicted at p. A refusal's RetryAfter is when the same
// request would be admitted if nothing else arrived (retryAfterLocked).
//
// probe reports a request admitted as a probe: it must run whatever the
// estimates say of it meanwhile (see expiredLocked), or it measures nothing.
func (s *Scheduler[P]) refuseLocked(c Class, ttft time.Duration, failFast bool, p prediction, now time.Time) (probe bool, err error) {
	i := c.index()
	if len(s.mu.queue[i])+s.mu.inferN[i] >= s.cfg.QueueLimit {
		return false, &OverloadError{Class: c.String(), QueueFull: true, RetryAfter: s.drainEstimateLocked(c, now)}
	}
	if !failFast || ttft <= 0 || p.Total() <= p.limit(ttft) {
		return false, nil
	}
	if p.Idle {
		// Nothing ahead and nothing beside it: only the request's own
		// predicted cost is over. Admit a probe now and then, so the
		// estimate is measured again instead of refusing it forever; unless
		// the configured part alone is over, which no measurement revises.
		if p.Fixed > ttft {
			return false, &OverloadError{Class: c.String(), Predicted: p.Total(), SLO: ttft, Alone: true, RetryAfter: probeEvery}
		}
		if !now.Before(s.mu.nextProbe) {
			s.mu.nextProbe = now.Add(probeEvery)
			s.mu.stats.Probes++
			return true, nil
		}
		return false, &OverloadError{Class: c.String(), Predicted: p.Total(), SLO: ttft, Alone: true, RetryAfter: s.mu.nextProbe.Sub(now)}
	}
	return false, &OverloadError{Class: c.String(), Predicted: p.Total(), SLO: ttft, Limit: p.limit(ttft), RetryAfter: s.retryAfterLocked(p, ttft, now)}
}

// ttftHeadroom is the share of a TTFT objective a busy device's prediction
// may use: the queue's wait is predicted from rates that move from step to
// step, and a request admitted on a prediction just under its objective is
// late as often as not (then refused late, see expiredLocked). An idle
// device's prediction is the request's own prefill alone and gets the
// whole objective.
const ttftHeadroom = 0.7

// limit is the predicted TTFT up to which a request with objective ttft
// is admitted.
func (p prediction) limit(ttft time.Duration) time.Duration {
	if p.Idle {
		return ttft
	}
	return time.Duration(ttftHeadroom * float64(ttft))
}

// retryAfterLocked is how long until a request predicted at p on a busy
// device would be admitted if nothing else arrived. The queue ahead drains
// at the rate p was predicted with, so its wait falls a second per second
// down to the step in flight: if its own cost beside that step fits, that
// is p.Total() − ttft. Otherwise it fits only on an idle device: once the
// device has drained (untilIdleLocked), and, if even its solo cost is over,
// once the next probe is due.
func (s *Scheduler[P]) retryAfterLocked(p prediction, ttft time.Duration, now time.Time) time.Duration {
	step, limit := s.mu.est.step, p.limit(ttft)
	if p.Own+step <= limit {
		return max(p.Total()-limit, step)
	}
	d := s.untilIdleLocked(now)
	if p.IdleOwn > ttft {
		d = max(d, s.mu.nextProbe.Sub(now))
	}
	return max(d, step)
}
