package llm

import (
	"container/heap"
	"math"
	"math/bits"
	"sync"

	"github.com/edgeinfer/edgeinfer/runtime/internal/grammar"
)

// Decoding is what a request asks of its sampling beyond SamplingParams:
// a grammar its output must follow and the log-probabilities to record.
// The engine makes one per request; the scheduler carries it to Admit
// untouched (sched.Request.Attach), and a resumed (preempted) sequence
// rebuilds its constraint state from the tokens generated so far.
type Decoding struct {
	// Constraint masks each row before sampling so that only tokens the
	// grammar allows can be drawn; nil generates freely.
	Constraint *grammar.TokenGrammar
	// MaxTokens is the request's token cap (0: the context alone): the
	// constraint keeps the output completable within it.
	MaxTokens int
	// LogProbs, when set, receives each sampled token's log-probability
	// and TopLogProbs alternatives.
	LogProbs    *LogProbs
	TopLogProbs int
}

// TokenLogProb is a token's log-probability under the distribution it was
// drawn from: the logits after the penalties and the constraint's mask,
// divided by the temperature (1 for greedy decoding), before top-k, top-p
// and min-p truncation.
type TokenLogProb struct {
	Token   int32
	LogProb float32
	// Top are the most likely tokens of that distribution, most likely first.
	Top []TopLogProb
}

// TopLogProb is one alternative of a TokenLogProb.
type TopLogProb struct {
	Token   int32
	LogProb float32
}

// LogProbs collects a sequence's log-probabilities by output index: the
// device loop puts them as it samples, the request's reader takes them
// once the token has come out of the scheduler (which is after it was put).
// It is safe for concurrent use.
type LogProbs struct {
	mu sync.Mutex
	m  map[int]TokenLogProb
}

func (l *LogProbs) put(i int, t TokenLogProb) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[int]TokenLogProb{}
	}
	l.m[i] = t
	l.mu.Unlock()
}

// Take returns and forgets the log-probability of output token i.
func (l *LogProbs) Take(i int) (TokenLogProb, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.m[i]
	delete(l.m, i)
	return t, ok
}

func allowed(mask []uint64, tok int32) bool {
	return int(tok>>6) < len(mask) && mask[tok>>6]&(1<<(tok&63)) != 0
}

// logProbs computes the record of tok from logits (penalised) at
// temperature t (0: 1), over the tokens of mask (nil: all).
func logProbs(logits []float32, mask []uint64, tok int32, t float32, top int) TokenLogProb {
	inv := float32(1)
	if t > 0 {
		inv = 1 / t
	}
	each := func(f func(i int, l float32)) {
		if mask == nil {
			for i, l := range logits {
				f(i, l)
			}
			return
		}
		for w, word := range mask {
			for ; word != 0; word &= word - 1 {
				if i := w*64 + bits.TrailingZeros64(word); i < len(logits) {
					f(i, logits[i])
				}
			}
		}
	}
	mx := math.Inf(-1)
	each(func(_ int, l float32) { mx = math.Max(mx, float64(l*inv)) })
	var sum float64
	each(func(_ int, l float32) { sum += math.Exp(float64(l*inv) - mx) })
	lse := mx + math.Log(sum)
	out := TokenLogProb{Token: tok, LogProb: float32(float64(logits[tok]*inv) - lse)}
	if top > 0 {
		h := candHeap{}
		each(func(i int, l float32) {
			if math.IsInf(float64(l), -1) {
				return
			}
			if len(h) < top {
				heap.Push(&h, candidate{int32(i), l})
			} else if l > h[0].p {
				h[0] = candidate{int32(i), l}
				heap.Fix(&h, 0)
			}
		})
		out.Top = make([]TopLogProb, len(h))
		for i := len(h) - 1; i >= 0; i-- {
			c := heap.Pop(&h).(candidate)
			out.Top[i] = TopLogProb{Token: c.id, LogProb: float32(float64(c.p*inv) - lse)}
		}
	}
	return out
}

// candHeap is a min-heap of candidates by logit.
type candHeap []candidate

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	return h[i].p < h[j].p || h[i].p == h[j].p && h[i].id > h[j].id
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
