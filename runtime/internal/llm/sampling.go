package llm

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"

	"github.com/edgeinfer/edgeinfer/pkg/vec"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
)

// SamplingParams are the scheduler's sampling parameters (the one
// declaration of them).
type SamplingParams = sched.Sampling

// Validate reports parameters out of their documented range.
func validateSampling(p SamplingParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadSampling, err)
	}
	return nil
}

func isNaN32(f float32) bool { return f != f }

// Sampler draws tokens for one sequence. It keeps the sequence's token counts
// for the penalties and its own random stream, so two sequences never share
// randomness and a seeded run is reproducible whatever else is batched with it.
//
// A Sampler is not safe for concurrent use.
type Sampler struct {
	p      SamplingParams
	pcg    *rand.PCG
	rng    *rand.Rand
	drawn  int           // output tokens so far: the index of the next draw
	seen   map[int32]int // prompt and output tokens, for the repetition penalty
	output map[int32]int // output tokens only, for presence/frequency
	cand   []candidate   // scratch, reused between calls
	best   []candidate   // nucleus's result, reused between calls
}

type candidate struct {
	id int32
	p  float32 // logit, then probability
}

// NewSampler returns a sampler for a sequence that starts with prompt.
func NewSampler(p SamplingParams, prompt []int32) (*Sampler, error) {
	if err := validateSampling(p); err != nil {
		return nil, err
	}
	pcg := rand.NewPCG(p.Seed, 0)
	s := &Sampler{
		p:      p,
		pcg:    pcg,
		rng:    rand.New(pcg),
		seen:   make(map[int32]int),
		output: make(map[int32]int),
	}
	for _, t := range prompt {
		s.seen[t]++
	}
	return s, nil
}

// Observe records a generated token (call it for every token the sequence
// emits, sampled here or forced by the caller).
func (s *Sampler) Observe(tok int32) {
	s.drawn++
	s.seen[tok]++
	s.output[tok]++
}

// Sample picks the next token from logits (one row, length vocab). logits is
// modified in place by the penalties.
func (s *Sampler) Sample(logits []float32) int32 { return s.SampleMasked(logits, nil) }

// SampleMasked is Sample among the tokens of mask (a bitset over the row;
// nil allows every token): the others are left out after the penalties
// and before temperature, top-k, top-p and min-p, greedy decoding
// included, as if their logits were −Inf. mask must allow at least one
// token. A mask allowing few tokens is read as their list (a pass over
// its words, not over the row); one allowing most sets the others' logits
// to −Inf in place and samples the row as without a mask.
func (s *Sampler) SampleMasked(logits []float32, mask []uint64) int32 {
	s.applyPenalties(logits)
	var c []candidate
	sparse := false
	if mask != nil {
		n := 0
		for _, w := range mask {
			n += bits.OnesCount64(w)
		}
		sparse = n*8 < len(logits)
		if !sparse {
			inf := float32(math.Inf(-1))
			for w, word := range mask {
				for z := ^word; z != 0; z &= z - 1 {
					if i := w*64 + bits.TrailingZeros64(z); i < len(logits) {
						logits[i] = inf
					}
				}
			}
			for i := len(mask) * 64; i < len(logits); i++ {
				logits[i] = inf
			}
		}
	}
	if sparse {
		c = s.cand[:0]
		for w, word := range mask {
			for ; word != 0; word &= word - 1 {
				i := w*64 + bits.TrailingZeros64(word)
				if i < len(logits) && !math.IsInf(float64(logits[i]), -1) {
					c = append(c, candidate{int32(i), logits[i]})
				}
			}
		}
		s.cand = c
		if len(c) == 0 { // every allowed logit is −Inf
			return firstAllowed(mask)
		}
		if s.p.Temperature == 0 {
			best := c[0]
			for _, x := range c[1:] {
				if x.p > best.p {
					best = x
				}
			}
			return best.id
		}
	} else if s.p.Temperature == 0 {
		t := int32(vec.Argmax(logits))
		if mask != nil && !allowed(mask, t) { // every allowed logit is −Inf
			t = firstAllowed(mask)
		}
		return t
	}
	// The random stream of draw i depends only on (seed, i), so a sequence
	// that is preempted and recomputed (its sampler rebuilt and fed the
	// tokens so far through Observe) draws exactly what it would have.
	s.pcg.Seed(s.p.Seed, uint64(s.drawn)*0x9e3779b97f4a7c15+1)
	inv := 1 / s.p.Temperature
	// the softmax's maximum, numerically stable (a comparison, not the
	// builtin max, whose NaN handling took a sixth of a 32k row's
	// sampling: BenchmarkSampleFullVocab); a whole row's in the pass that
	// lists its candidates
	maxL := float32(math.Inf(-1))
	switch k := s.p.TopK; {
	case sparse && k > 0 && k < len(c):
		c = topKCandidates(c, k)
	case sparse:
	case k > 0 && k < len(logits):
		c = topK(s.cand[:0], logits, k)
	default:
		c = slices.Grow(s.cand[:0], len(logits))[:len(logits)]
		for i, l := range logits {
			c[i] = candidate{int32(i), l}
			if l > maxL {
				maxL = l
			}
		}
	}
	if mask != nil && !sparse {
		// masked tokens left by top-k have no probability: drop them
		c = slices.DeleteFunc(c, func(x candidate) bool { return math.IsInf(float64(x.p), -1) })
		if len(c) == 0 {
			return firstAllowed(mask)
		}
	}
	if math.IsInf(float64(maxL), -1) {
		for _, x := range c {
			if x.p > maxL {
				maxL = x.p
			}
		}
	}
	// Each candidate's weight e^((l − max)/T), the maximum's exactly 1, and
	// their total: the draw and the filters work on weights, a token's
	// probability its weight over the total, with no pass that divides
	// them out (a third of a 32k row's sampling at temperature alone:
	// BenchmarkSampleFullVocab's t1 cases).
	total := expScaled(c, maxL, inv)
	s.cand = c
	if s.p.TopP > 0 && s.p.TopP < 1 || s.p.MinP > 0 {
		if i, ok := s.nucleusDraw(c, total); ok {
			return c[i].id
		}
		c = s.nucleus(c, total)
		total = 0
		for _, x := range c {
			total += float64(x.p)
		}
	}
	return draw(c, s.rng.Float64()*total)
}

// nucleusDraw draws from all of c (weights summing to total) and keeps the
// draw where it lies in the nucleus — the cut nucleus makes: at or above
// min-p times the largest weight (1), and ranked (most likely first, equal
// weights in c's order) where the mass ranked before it is still short of
// top-p. That is rejection sampling: a kept draw is distributed as a draw
// from the nucleus alone. It tries twice and reports false after two
// draws outside (the caller then cuts the nucleus and draws from it: the
// three together still draw each token of the nucleus with its weight
// over the nucleus's mass, TestNucleusDrawDistribution). It runs for top-p
// of one half and more, where most draws fall inside; min-p alone cuts in
// one pass, and a peaked row's min-p nucleus can hold a small part of the
// mass. One draw and one pass that sums what ranks before it cost half of
// topPThreshold's passes and the cut's (BenchmarkSampleFullVocab's top-p
// cases).
func (s *Sampler) nucleusDraw(c []candidate, total float64) (int, bool) {
	if !(s.p.TopP >= 0.5 && s.p.TopP < 1) || !(total > 0) {
		return 0, false
	}
	floor := float32(0)
	if s.p.MinP > 0 {
		floor = s.p.MinP
	}
	target := float64(s.p.TopP) * total
	for range 2 {
		i := drawAt(c, s.rng.Float64()*total)
		w := c[i].p
		if !(w >= floor && w > 0) {
			continue
		}
		// the mass ranked before c[i]: heavier, or as heavy and earlier
		var parts [4]float64
		for j, x := range c[:i] {
			if x.p >= w {
				parts[j&3] += float64(x.p)
			}
		}
		for j, x := range c[i+1:] {
			if x.p > w {
				parts[j&3] += float64(x.p)
			}
		}
		if (parts[0]+parts[1])+(parts[2]+parts[3]) < target {
			return i, true
		}
	}
	return 0, false
}

// drawBlock is how many weights draw sums at a time.
const drawBlock = 64

// draw is the id of the candidate drawAt picks.
func draw(c []candidate, r float64) int32 { return c[drawAt(c, r)].id }

// drawAt is the index of the candidate at which the running sum of the
// positive weights of c passes r (r in [0, their total)), the last
// positive one when rounding leaves r short, and for a NaN r (a NaN
// weight) the last candidate not ≤ 0. Blocks of drawBlock weights are
// summed first, in independent additions, and r is walked through them
// before the one block it ends in is walked weight by weight: one chain
// of dependent subtractions over a 32k row took a third of sampling at
// temperature alone (BenchmarkSampleFullVocab's t1 cases).
func drawAt(c []candidate, r float64) int {
	last := 0
	if !(r >= 0) { // NaN (a NaN weight): the last candidate not ≤ 0, as the walk below would end
		for i, x := range c {
			if !(x.p <= 0) {
				last = i
			}
		}
		return last
	}
	at := 0 // c[at:] is left to walk
	for len(c)-at > drawBlock {
		var parts [4]float64
		for i, x := range c[at : at+drawBlock] {
			if x.p > 0 {
				parts[i&3] += float64(x.p)
			}
		}
		sum := (parts[0] + parts[1]) + (parts[2] + parts[3])
		if r < sum {
			break
		}
		r -= sum
		for i, x := range c[at : at+drawBlock] {
			if x.p > 0 {
				last = at + i
			}
		}
		at += drawBlock
	}
	for i, x := range c[at:] {
		if x.p <= 0 {
			continue
		}
		last = at + i
		r -= float64(x.p)
		if r < 0 {
			return at + i
		}
	}
	return last
}

// topKCandidates keeps the k most likely of c (reordered in place), by
// the same min-heap as topK.
func topKCandidates(c []candidate, k int) []candidate {
	h := c[:0] // the heap fills c's front, behind the reading
	for i := 0; i < len(c); i++ {
		x := c[i]
		if len(h) < k {
			h = append(h, x)
			up(h, len(h)-1)
		} else if x.p > h[0].p {
			h[0] = x
			down(h, 0)
		}
	}
	return h
}

// firstAllowed is the lowest token of mask (mask is not empty).
func firstAllowed(mask []uint64) int32 {
	for w, b := range mask {
		if b != 0 {
			return int32(w*64 + bits.TrailingZeros64(b))
		}
	}
	return 0
}

// expScaledGo (expScaled's loop in Go, and where the CPU lacks AVX2 all
// of it) replaces each candidate's logit l by e^((l − maxL)·inv) in
// float32 and returns their sum. The exponential is Cephes' expf — n =
// round(x·log2 e), r = x − n·ln 2 in two parts, e^r by its degree-6
// polynomial, times 2^n — within one ulp of math.Exp (TestExpScaled),
// written out in the loop (a call per candidate cost as much again): on a
// 32k row math.Exp in float64 was half of sampling at temperature alone,
// this a fifth (BenchmarkSampleFullVocab's t1 cases). Below −87.3 (under
// the smallest normal float32) and at −Inf (a masked token) it is 0; NaN
// stays NaN. Four sums, not one chain of dependent additions.
func expScaledGo(c []candidate, maxL, inv float32) float64 {
	var sums [4]float64
	for i := range c {
		x := (c[i].p - maxL) * inv
		e := x // NaN stays NaN
		switch {
		case x >= -87.33654:
			const shifter = 1.5 * (1 << 23) // adding it rounds to an integer
			n := (x*1.44269504 + shifter) - shifter
			r := x - n*0.693359375
			r -= n * -2.12194440e-4
			p := float32(1.9875691500e-4)
			p = p*r + 1.3981999507e-3
			p = p*r + 8.3334519073e-3
			p = p*r + 4.1665795894e-2
			p = p*r + 1.6666665459e-1
			p = p*r + 5.0000001201e-1
			e = (p*r*r + r + 1) * math.Float32frombits(uint32(int32(n)+127)<<23)
		case x == x:
			e = 0
		}
		c[i].p = e
		sums[i&3] += float64(e)
	}
	return (sums[0] + sums[1]) + (sums[2] + sums[3])
}

// nucleus is what top-p and min-p keep of c (weights summing to total,
// the largest 1), in token order (the order the draw walks), in s.best:
// with min-p the candidates at or above min-p times the largest
// probability; of those, with top-p, the most likely whose probabilities
// first add up to top-p (equal probabilities taken in token order) — the
// smallest set HF's and llama.cpp's top-p keep. Found without
// sorting: sorting a 32k row took ~3 ms a token, and the nucleus of a flat
// row (a random model's, or a high temperature's) is thousands of tokens
// (BenchmarkSampleFullVocab's top-p and min-p cases); the cut's probability
// comes from topPThreshold's three passes instead.
func (s *Sampler) nucleus(c []candidate, total float64) []candidate {
	floor := float32(0)
	if s.p.MinP > 0 {
		floor = s.p.MinP // times the largest weight, the maximum's: 1
	}
	t, ties := float32(0), -1 // keep p > t, and the first ties (all: −1) of p == t
	if s.p.TopP > 0 && s.p.TopP < 1 {
		t, ties, s.best = topPThreshold(c, floor, float64(s.p.TopP)*total, s.best[:0])
	}
	s.best = s.best[:0]
	for _, x := range c {
		if !(x.p >= floor && x.p > 0) || x.p < t {
			continue
		}
		if x.p == t && ties >= 0 {
			if ties == 0 {
				continue
			}
			ties--
		}
		s.best = append(s.best, x)
	}
	if len(s.best) == 0 {
		return c // no positive probability (NaN logits): the draw's fallback decides
	}
	return s.best
}

// topPThreshold is the weight t at which the candidates at or above floor,
// most likely first, reach mass topP (in the weights' units), and how many
// of those equal to t the cut takes (the rest rank after them); t = floor
// and ties = −1 (all) where their whole mass is short of topP. It selects
// by the bits of the weights, which order positive floats as integers: a pass sums the
// mass under each value of the top 11 bits (topBuckets), the bucket where the running
// mass (from the top) crosses topP is refined by the next 11 bits in a
// second pass, which also gathers that bucket's candidates (into scratch,
// returned) for the last 10 bits' pass — two linear passes and a short
// one, no sort.
func topPThreshold(c []candidate, floor float32, topP float64, scratch []candidate) (t float32, ties int, _ []candidate) {
	var acc float64           // mass ranked above the bucket being refined
	var mass [1 << 11]float64 // each level clears what it touched
	prefix, shift := uint32(0), uint(32)
	for level, w := range []uint{11, 11, 10} {
		shift -= w
		gather := level == 1
		lo, hi := 1<<w, -1 // the buckets a pass touched: a few hundred at most
		if level == 0 {
			lo, hi = topBuckets(c, floor, &mass)
		}
		for _, x := range c {
			if level == 0 {
				break // topBuckets made this level's histogram
			}
			if !(x.p >= floor && x.p > 0) {
				continue
			}
			u := math.Float32bits(x.p)
			if level > 0 && u>>(shift+w) != prefix>>(shift+w) {
				continue
			}
			i := int(u >> shift & (1<<w - 1))
			mass[i] += float64(x.p)
			lo, hi = min(lo, i), max(hi, i)
			if gather {
				scratch = append(scratch, x)
			}
		}
		if gather {
			c = scratch // the last pass reads only the bucket's candidates
		}
		b, low := -1, -1 // the bucket where topP is reached; the lowest with mass
		for i := hi; i >= lo; i-- {
			if mass[i] == 0 {
				continue
			}
			low = i
			if acc+mass[i] >= topP {
				b = i
				break
			}
			acc += mass[i]
		}
		switch {
		case b >= 0:
		case level == 0 || low < 0:
			return floor, -1, scratch // everything at or above the floor is short of topP
		default:
			// the parent bucket reached topP but its parts, summed in
			// another order, fall short by a rounding: take its last part
			b = low
			acc -= mass[low]
		}
		prefix |= uint32(b) << shift
		if hi >= lo {
			clear(mass[lo : hi+1]) // for the next level
		}
	}
	t = math.Float32frombits(prefix)
	return t, max(int(math.Ceil((topP-acc)/float64(t))), 1), scratch
}

// topBuckets is topPThreshold's first level: the mass of the candidates at
// or above floor under each value of their top 11 bits, in mass, and the
// lowest and highest bucket it touched. Four histograms take the elements
// in turn: a row's neighbours mostly share a bucket, and with one
// histogram each addition waited for the store of the one before (a
// quarter of a 32k row's top-p: BenchmarkSampleFullVocab's top-p cases).
func topBuckets(c []candidate, floor float32, mass *[1 << 11]float64) (lo, hi int) {
	var part [4][1 << 11]float64
	lo, hi = 1<<11, -1
	add := func(h *[1 << 11]float64, x candidate) {
		if x.p >= floor && x.p > 0 {
			i := int(math.Float32bits(x.p) >> 21)
			h[i] += float64(x.p)
			lo, hi = min(lo, i), max(hi, i)
		}
	}
	k := 0
	for ; k+4 <= len(c); k += 4 {
		add(&part[0], c[k])
		add(&part[1], c[k+1])
		add(&part[2], c[k+2])
		add(&part[3], c[k+3])
	}
	for ; k < len(c); k++ {
		add(&part[0], c[k])
	}
	for i := lo; i <= hi; i++ {
		mass[i] = (part[0][i] + part[1][i]) + (part[2][i] + part[3][i])
	}
	return lo, hi
}

func (s *Sampler) applyPenalties(logits []float32) {
	if rp := s.p.RepetitionPenalty; rp != 0 && rp != 1 {
		for t := range s.seen {
			if int(t) < len(logits) {
				if logits[t] > 0 {
					logits[t] /= rp
				} else {
					logits[t] *= rp
				}
			}
		}
	}
	if s.p.PresencePenalty != 0 || s.p.FrequencyPenalty != 0 {
		for t, n := range s.output {
			if int(t) < len(logits) {
				logits[t] -= s.p.PresencePenalty + s.p.FrequencyPenalty*float32(n)
			}
		}
	}
}

// topK appends the k largest logits to dst using a small min-heap, O(V log k).
func topK(dst []candidate, logits []float32, k int) []candidate {
	h := dst[:0]
	n := min(k, len(logits))
	for i, l := range logits[:n] {
		h = append(h, candidate{int32(i), l})
		up(h, len(h)-1)
	}
	if n == 0 {
		return h
	}
	// the rest against the k-th best so far, kept in a register: most
	// logits fall short of it and cost one comparison (a third less time
	// than the heap's root read and a length test each:
	// BenchmarkSampleFullVocab's top-k cases)
	th := h[0].p
	for i, l := range logits[n:] {
		if l > th {
			h[0] = candidate{int32(n + i), l}
			down(h, 0)
			th = h[0].p
		}
	}
	return h
}

func up(h []candidate, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].p <= h[i].p {
			return
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
}

func down(h []candidate, i int) {
	for {
		l, small := 2*i+1, i
		if l < len(h) && h[l].p < h[small].p {
			small = l
		}
		if r := l + 1; r < len(h) && h[r].p < h[small].p {
			small = r
		}
		if small == i {
			return
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
}
