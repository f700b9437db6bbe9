package sched

import "time"

// TPOT-aware batch sizing.
//
// Batching raises throughput but every decode row makes the step longer,
// and the step is every running stream's time per output token. On a small
// device the step grows steeply with rows (BenchmarkBatchScaling in
// runtime/engine measures step time against rows), so a fixed MaxBatch of 8 can put all
// eight streams over a TPOT objective that four would have met: throughput
// that no user gets. The seeds' rule is to maximise concurrent throughput
// within the latency SLO; so admission adds a sequence only while the
// predicted step — the decode cost at one more row plus the prefill work
// the steps have been carrying — stays within the tightest TPOT objective
// among the running sequences and the candidate. A request that does not
// fit waits (its TTFT grows, and a fail-fast one is refused by the TTFT
// prediction), so the running streams keep their promise.

// tpotHeadroom is the share of the TPOT objective the predicted step may
// use: the estimates are averages and steps jitter.
const tpotHeadroom = 0.9

// decodeCost learns the device's step time from the steps it runs: an
// EWMA of decode-only step time per row count, and an EWMA of what prefill
// chunks add to the steps that carry decode rows (the share of each step a
// decoding stream pays for other requests' prompts). Owned by the device
// loop.
type decodeCost struct {
	byRows  []time.Duration // [rows] EWMA of decode-only steps; 0 = never seen
	prefill time.Duration   // EWMA of step time above the decode cost
	alpha   float64
}

// prefillAlpha is slower than the step EWMA: prefill arrives in bursts of
// large steps, and what matters is its average over a stream's lifetime.
const prefillAlpha = 0.05

func newDecodeCost(maxRows int, alpha float64) *decodeCost {
	return &decodeCost{byRows: make([]time.Duration, maxRows+1), alpha: alpha}
}

// observe feeds one step: rows decode rows, prefill tokens, took d.
func (c *decodeCost) observe(rows, prefill int, d time.Duration) {
	if rows <= 0 || d <= 0 {
		return
	}
	if prefill == 0 && rows < len(c.byRows) {
		c.byRows[rows] = ewmaDur(c.byRows[rows], d, c.alpha)
	}
	base := c.predict(rows)
	if base <= 0 {
		return
	}
	extra := max(d-base, 0)
	c.prefill += time.Duration(prefillAlpha * float64(extra-c.prefill))
}

// predict is the decode-only step time at rows, 0 when nothing is known.
// A measured row count answers itself; otherwise a least-squares line over
// the measured counts, never below the largest measured count under rows.
// With a single measurement v at k rows it takes half of v as the fixed
// part of a step and half as per-row cost (int4 models on small CPUs are
// near that split in BenchmarkBatchScaling; fp32 and small models are
// mostly fixed).
// Scaling all of v per row instead is so pessimistic that a second stream
// may never be admitted, and then a second row count is never measured:
// the estimate must let admission explore, and a wrong guess costs the
// steps until the new row count's own measurement replaces it.
func (c *decodeCost) predict(rows int) time.Duration {
	if rows <= 0 {
		return 0
	}
	if rows < len(c.byRows) && c.byRows[rows] > 0 {
		return c.byRows[rows]
	}
	var n, sx, sy, sxx, sxy float64
	var below time.Duration
	lastK, lastV := 0, time.Duration(0)
	for k, v := range c.byRows {
		if v <= 0 {
			continue
		}
		x, y := float64(k), float64(v)
		n, sx, sy, sxx, sxy = n+1, sx+x, sy+y, sxx+x*x, sxy+x*y
		if k < rows {
			below = max(below, v)
		}
		lastK, lastV = k, v
	}
	switch {
	case n == 0:
		return 0
	case n == 1:
		half := float64(lastV) / 2
		return time.Duration(half + half*float64(rows)/float64(lastK))
	}
	den := n*sxx - sx*sx
	slope := (n*sxy - sx*sy) / den
	icpt := (sy - slope*sx) / n
	return max(time.Duration(icpt+slope*float64(rows)), below)
}

// stepAt is the predicted time per output token of a stream while rows
// sequences decode: the decode cost plus the prefill share.
func (c *decodeCost) stepAt(rows int) time.Duration {
	d := c.predict(rows)
	if d == 0 {
		return 0
	}
	return d + c.prefill
}

// tpotTarget is the tightest TPOT objective among the running sequences of
// model and g; 0 when none has one.
func (s *Scheduler[P]) tpotTarget(g *genReq) time.Duration {
	t := g.req.SLO.TPOT
	for _, r := range s.running {
		if r.req.Model == g.req.Model && r.req.SLO.TPOT > 0 && (t == 0 || r.req.SLO.TPOT < t) {
			t = r.req.SLO.TPOT
		}
	}
	return t
}

// tpotRoom reports whether admitting g keeps the predicted step of its
// model within the tightest TPOT objective. With nothing running of its
// model, with no objective or with the TPOT rule off there is room. Before
// any decode step was measured there is not: one stream runs until the
// first measurement says what a row costs (a cold start that admitted a
// full batch blind would break every objective at once).
func (s *Scheduler[P]) tpotRoom(g *genReq) bool {
	if s.cfg.NoTPOTAdmission {
		return true
	}
	target := s.tpotTarget(g)
	if target == 0 {
		return true
	}
	rows := 1
	for _, r := range s.running {
		if r.req.Model == g.req.Model {
			rows++
		}
	}
	if rows == 1 {
		return true
	}
	c := s.costOf(g.req.Model)
	p := c.stepAt(rows)
	if p <= 0 || float64(p) > tpotHeadroom*float64(target) {
		return false
	}
	return s.slackAllows(g, c.predict(rows))
}

// assumedRemaining stands in for the tokens a stream without MaxTokens
// still has to generate.
const assumedRemaining = 256

// slackAllows checks each running stream with a TPOT objective against
// the cost of admitting g: g's prefill (at the measured prefill speed)
// delays every running stream once, and every later step runs at the
// decode cost of rows. A stream's TPOT is (last − first token)/(n − 1), so
// what it can absorb is its slack so far — objective × tokens since its
// first minus the time since — plus, for each token it still has to
// generate (MaxTokens − generated), the objective (with headroom) minus the
// step. The average prefill share in stepAt spreads prefills over time;
// this catches the stream near its end, or already behind, for which one
// more prompt is the one too many.
func (s *Scheduler[P]) slackAllows(g *genReq, step time.Duration) bool {
	s.mu.Lock()
	speed := s.mu.est.prefillSpeed
	s.mu.Unlock()
	if speed <= 0 {
		return true
	}
	pre := prefillTime(g, speed)
	now := time.Now()
	for _, r := range s.running {
		slo := r.req.SLO.TPOT
		if r.req.Model != g.req.Model || slo <= 0 {
			continue
		}
		gen := len(r.tokens) - r.promptLen
		remaining := assumedRemaining
		if r.req.MaxTokens > 0 {
			remaining = r.req.MaxTokens - gen
		}
		if remaining <= 0 {
			continue
		}
		var slack time.Duration
		if gen >= 1 && !r.tl.FirstToken.IsZero() {
			slack = time.Duration(gen-1)*slo - now.Sub(r.tl.FirstToken)
		}
		perToken := time.Duration(tpotHeadroom*float64(slo)) - step
		if slack+time.Duration(remaining)*perToken < pre {
			return false
		}
	}
	return true
}

// prefillTime is how long g's remaining prefill takes at speed tokens/s.
func prefillTime(g *genReq, speed float64) time.Duration {
	return time.Duration(float64(g.pendingPrefill()) / speed * float64(time.Second))
}

// costOf is model's cost model, created on first use.
func (s *Scheduler[P]) costOf(model string) *decodeCost {
	c := s.cost[model]
	if c == nil {
		c = newDecodeCost(s.cfg.MaxBatch, s.cfg.EWMAAlpha)
		s.cost[model] = c
	}
	return c
}
