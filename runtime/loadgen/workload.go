package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"

	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// sample draws one length from d.
func (d Dist) sample(r *rand.Rand) int {
	switch d.Kind {
	case "uniform":
		return d.Min + r.IntN(d.Max-d.Min+1)
	case "normal":
		v := int(math.Round(d.Mean + d.Stddev*r.NormFloat64()))
		return min(max(v, d.Min), d.Max)
	}
	return d.Value
}

// workload draws requests: prompt token ids and output bounds. It is safe
// for concurrent use (its random source is guarded).
type workload struct {
	mu     sync.Mutex
	rng    *rand.Rand
	input  Dist
	output Dist
	// failFast is the share of requests sent fail-fast (Spec.FailFast).
	failFast float64
	// corpus is the tokenised corpus; nil means synthetic ids in
	// [0, vocab).
	corpus []int32
	vocab  int
	source string
}

func newWorkload(s *Spec, tok *tokenizer.Tokenizer, vocab int) (*workload, error) {
	w := &workload{
		rng:      rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15)),
		input:    s.Input,
		output:   s.Output,
		failFast: s.FailFast,
		vocab:    vocab,
		source:   fmt.Sprintf("synthetic uniform ids in [0, %d)", vocab),
	}
	if len(s.Prompts.Corpus) == 0 {
		return w, nil
	}
	if tok == nil {
		return nil, fmt.Errorf("%w: the model has no tokenizer to encode prompts.corpus", ErrCorpus)
	}
	for _, path := range s.Prompts.Corpus {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorpus, err)
		}
		for _, id := range tok.Encode(string(b)) {
			w.corpus = append(w.corpus, int32(id))
		}
	}
	if len(w.corpus) < s.Input.upper() {
		return nil, fmt.Errorf("%w: %d tokens, shorter than the longest prompt (%d)", ErrCorpus, len(w.corpus), s.Input.upper())
	}
	w.source = fmt.Sprintf("corpus %v (%d tokens), slices at random offsets", s.Prompts.Corpus, len(w.corpus))
	return w, nil
}

// next returns one request's prompt and output bound.
func (w *workload) next() ([]int32, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nextLocked()
}

// nextRequest is next and whether the request is sent fail-fast (drawn
// only when the share is strictly between 0 and 1, so a spec without
// fail-fast requests draws the same prompts as before the field existed).
func (w *workload) nextRequest() (prompt []int32, maxTokens int, failFast bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.failFast >= 1:
		failFast = true
	case w.failFast > 0:
		failFast = w.rng.Float64() < w.failFast
	}
	prompt, maxTokens = w.nextLocked()
	return prompt, maxTokens, failFast
}

func (w *workload) nextLocked() ([]int32, int) {
	n := w.input.sample(w.rng)
	out := w.output.sample(w.rng)
	p := make([]int32, n)
	if w.corpus != nil {
		off := w.rng.IntN(len(w.corpus) - n + 1)
		copy(p, w.corpus[off:off+n])
		return p, out
	}
	for i := range p {
		p[i] = int32(w.rng.IntN(w.vocab))
	}
	return p, out
}

// exp draws an exponential inter-arrival gap in seconds at rate per second.
func (w *workload) exp(rate float64) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rng.ExpFloat64() / rate
}
