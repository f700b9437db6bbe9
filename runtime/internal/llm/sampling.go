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
	cand   []candidate   // top-k's and a sparse mask's candidates, reused between calls
	// scratch reused between calls: the candidates' logits and ids (nil
	// for a whole row: index i is token i), their weights, what the
	// nucleus keeps, and topPThreshold's gathered bucket
	x      []float32
	ids    []int32
	w      []float32
	keptID []int32
	keptW  []float32
	bucket []float32
}

type candidate struct {
	id int32
	p  float32 // logit
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
	// The candidates: a whole row's logits where they are (token i at
	// index i), or top-k's and a sparse mask's few as logits and ids.
	x, ids := logits, []int32(nil)
	switch k := s.p.TopK; {
	case sparse && k > 0 && k < len(c):
		x, ids = s.split(topKCandidates(c, k))
	case sparse:
		x, ids = s.split(c)
	case k > 0 && k < len(logits):
		s.cand = topK(s.cand[:0], logits, k)
		x, ids = s.split(s.cand)
	}
	// the softmax's maximum, numerically stable (NaNs are never it)
	maxL := vec.Max(x)
	if mask != nil && math.IsInf(float64(maxL), -1) {
		return firstAllowed(mask) // every allowed logit −Inf
	}
	// Each candidate's weight e^((l − max)/T), the maximum's exactly 1 (a
	// masked token's 0), and their total: the draw and the filters work on
	// weights, a token's probability its weight over the total, with no
	// pass that divides them out (a third of a 32k row's sampling at
	// temperature alone: BenchmarkSampleFullVocab's t1 cases).
	s.w = slices.Grow(s.w[:0], len(x))[:len(x)]
	w := s.w
	total := expWeights(w, x, maxL, inv)
	if s.p.TopP > 0 && s.p.TopP < 1 || s.p.MinP > 0 {
		if i, ok := s.nucleusDraw(w, total); ok {
			return token(ids, i)
		}
		ids, w, total = s.nucleus(ids, w, total)
	}
	return token(ids, drawAt(w, s.rng.Float64()*total))
}

// split lists candidates' logits and ids apart, into the sampler's scratch.
func (s *Sampler) split(c []candidate) ([]float32, []int32) {
	s.x, s.ids = s.x[:0], s.ids[:0]
	for _, x := range c {
		s.x, s.ids = append(s.x, x.p), append(s.ids, x.id)
	}
	return s.x, s.ids
}

// token is candidate i's token: ids[i], or i itself where ids is nil (a
// whole row).
func token(ids []int32, i int) int32 {
	if ids == nil {
		return int32(i)
	}
	return ids[i]
}

// nucleusDraw draws from all of w (weights summing to total) and keeps the
// draw where it lies in the nucleus — the cut nucleus makes: at or above
// min-p times the largest weight (1), and ranked (most likely first, equal
// weights in w's order) where the mass ranked before it is still short of
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
func (s *Sampler) nucleusDraw(w []float32, total float64) (int, bool) {
	if !(s.p.TopP >= 0.5 && s.p.TopP < 1) || !(total > 0) {
		return 0, false
	}
	floor := s.p.MinP // times the largest weight, the maximum's: 1
	target := float64(s.p.TopP) * total
	for range 2 {
		i := drawAt(w, s.rng.Float64()*total)
		wi := w[i]
		if !(wi >= floor && wi > 0) {
			continue
		}
		// the mass ranked before candidate i: heavier, or as heavy and earlier
		var parts [4]float64
		for j, p := range w[:i] {
			if p >= wi {
				parts[j&3] += float64(p)
			}
		}
		for j, p := range w[i+1:] {
			if p > wi {
				parts[j&3] += float64(p)
			}
		}
		if (parts[0]+parts[1])+(parts[2]+parts[3]) < target {
			return i, true
		}
	}
	return 0, false
}

// drawBlock is how many weights drawAt sums at a time.
const drawBlock = 64

// drawAt is the index of the weight at which the running sum of the
// weights w (≥ 0, or some NaN) passes r (r in [0, their total)), the last
// positive one when rounding leaves r short, and for a NaN r (a NaN
// weight) the last one not ≤ 0. Blocks of drawBlock weights are summed
// first, in independent additions, and r is walked through them before
// the one block it ends in is walked weight by weight: one chain of
// dependent subtractions over a 32k row took a third of sampling at
// temperature alone (BenchmarkSampleFullVocab's t1 cases).
func drawAt(w []float32, r float64) int {
	if !(r >= 0) { // NaN (a NaN weight): the last weight not ≤ 0, as a walk would end
		last := 0
		for i, p := range w {
			if !(p <= 0) {
				last = i
			}
		}
		return last
	}
	at := 0 // w[at:] is left to walk
	for ; len(w)-at > drawBlock; at += drawBlock {
		var parts [4]float64
		for i, p := range w[at : at+drawBlock] {
			parts[i&3] += float64(p) // zeros add nothing
		}
		sum := (parts[0] + parts[1]) + (parts[2] + parts[3])
		if r < sum {
			break
		}
		r -= sum
	}
	for i, p := range w[at:] {
		if p <= 0 {
			continue
		}
		r -= float64(p)
		if r < 0 {
			return at + i
		}
	}
	for i := len(w) - 1; i > 0; i-- { // rounding left r short: the last positive weight
		if w[i] > 0 {
			return i
		}
	}
	return 0
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

// expWeightsGo (expWeights' loop in Go, and where the CPU lacks AVX2 all
// of it) writes each logit l's weight e^((l − maxL)·inv) in float32 to w
// (as long as x; it may be x) and returns their sum. The exponential is
// Cephes' expf — n = round(x·log2 e), r = x − n·ln 2 in two parts, e^r by its degree-6
// polynomial, times 2^n — within one ulp of math.Exp (TestExpWeights),
// written out in the loop (a call per weight cost as much again): on a
// 32k row math.Exp in float64 was half of sampling at temperature alone,
// this a fifth (BenchmarkSampleFullVocab's t1 cases). Below −87.3 (under
// the smallest normal float32) and at −Inf (a masked token) it is 0; NaN
// stays NaN. Four sums, not one chain of dependent additions.
func expWeightsGo(w, x []float32, maxL, inv float32) float64 {
	var sums [4]float64
	w = w[:len(x)]
	for i, l := range x {
		v := (l - maxL) * inv
		e := v // NaN stays NaN
		switch {
		case v >= -87.33654:
			const shifter = 1.5 * (1 << 23) // adding it rounds to an integer
			n := (v*1.44269504 + shifter) - shifter
			r := v - n*0.693359375
			r -= n * -2.12194440e-4
			p := float32(1.9875691500e-4)
			p = p*r + 1.3981999507e-3
			p = p*r + 8.3334519073e-3
			p = p*r + 4.1665795894e-2
			p = p*r + 1.6666665459e-1
			p = p*r + 5.0000001201e-1
			e = (p*r*r + r + 1) * math.Float32frombits(uint32(int32(n)+127)<<23)
		case v == v:
			e = 0
		}
		w[i] = e
		sums[i&3] += float64(e)
	}
	return (sums[0] + sums[1]) + (sums[2] + sums[3])
}

// nucleus is what top-p and min-p keep of the weights w (summing to
// total, the largest 1; ids as token says), in token order (the order the
// draw walks), as tokens and weights in the sampler's scratch, with their
// total:
// with min-p the candidates at or above min-p times the largest
// probability; of those, with top-p, the most likely whose probabilities
// first add up to top-p (equal probabilities taken in token order) — the
// smallest set HF's and llama.cpp's top-p keep. Found without
// sorting: sorting a 32k row took ~3 ms a token, and the nucleus of a flat
// row (a random model's, or a high temperature's) is thousands of tokens
// (BenchmarkSampleFullVocab's top-p and min-p cases); the cut's probability
// comes from topPThreshold's three passes instead.
func (s *Sampler) nucleus(ids []int32, w []float32, total float64) ([]int32, []float32, float64) {
	floor := s.p.MinP         // times the largest weight, the maximum's: 1
	t, ties := float32(0), -1 // keep p > t, and the first ties (all: −1) of p == t
	if s.p.TopP > 0 && s.p.TopP < 1 {
		t, ties, s.bucket = topPThreshold(w, floor, float64(s.p.TopP)*total, s.bucket[:0])
	}
	s.keptID, s.keptW = s.keptID[:0], s.keptW[:0]
	kept := 0.0
	for i, p := range w {
		if !(p >= floor && p > 0) || p < t {
			continue
		}
		if p == t && ties >= 0 {
			if ties == 0 {
				continue
			}
			ties--
		}
		s.keptID, s.keptW = append(s.keptID, token(ids, i)), append(s.keptW, p)
		kept += float64(p)
	}
	if len(s.keptW) == 0 {
		return ids, w, total // no positive weight (NaN logits): the draw's fallback decides
	}
	return s.keptID, s.keptW, kept
}

// topPThreshold is the weight t at which the weights w at or above floor,
// most likely first, reach mass topP (in the weights' units), and how many
// of those equal to t the cut takes (the rest rank after them); t = floor
// and ties = −1 (all) where their whole mass is short of topP. It selects
// by the bits of the weights, which order positive floats as integers: a
// pass sums the mass under each value of the top 11 bits (topBuckets),
// the bucket where the running mass (from the top) crosses topP is refined
// by the next 11 bits in a second pass (refineBuckets), which also gathers
// that bucket's weights (into scratch, returned) for the last 10 bits' —
// two linear passes and a short one, no sort.
func topPThreshold(w []float32, floor float32, topP float64, scratch []float32) (t float32, ties int, _ []float32) {
	var acc float64           // mass ranked above the bucket being refined
	var mass [1 << 11]float64 // each level clears what it touched
	prefix, shift := uint32(0), uint(32)
	for level, width := range []uint{11, 11, 10} {
		shift -= width
		var lo, hi int // the buckets the level touched: a few hundred at most
		switch level {
		case 0:
			lo, hi = topBuckets(w, floor, &mass)
		case 1:
			lo, hi, scratch = refineBuckets(w, floor, prefix, shift, width, &mass, true, scratch[:0])
		default:
			lo, hi, _ = refineBuckets(scratch, floor, prefix, shift, width, &mass, false, nil)
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

// refineBuckets is a later level of topPThreshold: the mass of the weights
// at or above floor whose bits above shift+width are prefix's, under each
// value of their next width bits, in mass; the lowest and highest bucket
// it touched; and, with gather, those weights appended to into.
func refineBuckets(w []float32, floor float32, prefix uint32, shift, width uint, mass *[1 << 11]float64, gather bool, into []float32) (lo, hi int, _ []float32) {
	lo, hi = 1<<width, -1
	for _, p := range w {
		u := math.Float32bits(p)
		if u>>(shift+width) != prefix>>(shift+width) || !(p >= floor && p > 0) {
			continue
		}
		i := int(u >> shift & (1<<width - 1))
		mass[i] += float64(p)
		lo, hi = min(lo, i), max(hi, i)
		if gather {
			into = append(into, p)
		}
	}
	return lo, hi, into
}

// topBuckets is topPThreshold's first level: the mass of the weights at or
// above floor under each value of their top 11 bits, in mass, and the
// lowest and highest bucket it touched. Four histograms take the elements
// in turn: a row's neighbours mostly share a bucket, and with one
// histogram each addition waited for the store of the one before (a
// quarter of a 32k row's top-p: BenchmarkSampleFullVocab's top-p cases).
func topBuckets(c []float32, floor float32, mass *[1 << 11]float64) (lo, hi int) {
	var part [4][1 << 11]float64
	lo, hi = 1<<11, -1
	add := func(h *[1 << 11]float64, p float32) {
		if p >= floor && p > 0 {
			i := int(math.Float32bits(p) >> 21)
			h[i] += float64(p)
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

// SampleMaskedArgmax is SampleMasked told the row's argmax as it came
// (pkg/vec's Argmax of logits before any penalty: a graph computes it
// beside the logits, pkg/onnx/llama's OutputGreedy), or −1 for none.
// Where the pick is that argmax — temperature 0, no penalty, no mask — it
// returns it without reading the row; an index outside the row is not
// taken.
func (s *Sampler) SampleMaskedArgmax(logits []float32, mask []uint64, argmax int) int32 {
	if mask == nil && argmax >= 0 && argmax < len(logits) && s.p.Temperature == 0 && !s.repeats() && !s.presence() {
		return int32(argmax)
	}
	return s.SampleMasked(logits, mask)
}

// repeats and presence report whether applyPenalties applies the
// repetition penalty, and the presence or frequency penalty.
func (s *Sampler) repeats() bool {
	rp := s.p.RepetitionPenalty
	return rp != 0 && rp != 1
}

func (s *Sampler) presence() bool { return s.p.PresencePenalty != 0 || s.p.FrequencyPenalty != 0 }

func (s *Sampler) applyPenalties(logits []float32) {
	if s.repeats() {
		rp := s.p.RepetitionPenalty
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
	if s.presence() {
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
