package llm

import (
	"fmt"
	"math"
	"testing"
)

func maskOf(n int, ids ...int32) []uint64 {
	m := make([]uint64, (n+63)/64)
	for _, id := range ids {
		m[id>>6] |= 1 << (id & 63)
	}
	return m
}

// The mask applies to every sampling mode: greedy takes the best allowed
// token, sampling (with top-k whose best tokens are all masked, top-p,
// min-p) never draws a masked one.
func TestSampleMasked(t *testing.T) {
	const V = 130
	logits := func() []float32 {
		l := make([]float32, V)
		for i := range l {
			l[i] = float32(i%17) / 4
		}
		l[5], l[100] = 9, 8 // the best two, both masked below
		return l
	}
	mask := maskOf(V, 3, 64, 129)
	greedy, _ := NewSampler(SamplingParams{}, nil)
	if got := greedy.SampleMasked(logits(), mask); got != 64 { // logits 0.75, 3.25, 2.5
		t.Fatalf("greedy under mask: %d, want 64", got)
	}
	for _, p := range []SamplingParams{{Temperature: 1}, {Temperature: 1, TopK: 2}, {Temperature: 0.5, TopP: 0.5}, {Temperature: 2, MinP: 0.1}} {
		for seed := range uint64(200) {
			p.Seed = seed
			s, _ := NewSampler(p, nil)
			if got := s.SampleMasked(logits(), mask); got != 3 && got != 64 && got != 129 {
				t.Fatalf("%+v: drew masked token %d", p, got)
			}
		}
	}
	// a mask allowing most tokens (masked in place): the best two are out
	dense := maskOf(V)
	for i := range dense {
		dense[i] = ^uint64(0)
	}
	dense[0] &^= 1 << 5
	dense[1] &^= 1 << (100 - 64)
	if got := greedy.SampleMasked(logits(), dense); got == 5 || got == 100 {
		t.Fatalf("greedy under a dense mask: %d", got)
	}
	for _, p := range []SamplingParams{{Temperature: 0.1}, {Temperature: 0.1, TopK: 2}} {
		for seed := range uint64(100) {
			p.Seed = seed
			s, _ := NewSampler(p, nil)
			if got := s.SampleMasked(logits(), dense); got == 5 || got == 100 {
				t.Fatalf("%+v: drew masked token %d", p, got)
			}
		}
	}
	// every allowed logit −Inf: still an allowed token
	l := logits()
	l[3], l[64], l[129] = float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1))
	if got := greedy.SampleMasked(l, mask); got != 3 {
		t.Fatalf("greedy with every allowed logit −Inf: %d", got)
	}
}

// Log-probabilities are a distribution: they sum to 1 over the row, the
// alternatives come most likely first, and temperature sharpens them.
func TestLogProbsRecord(t *testing.T) {
	l := []float32{1, 3, 2, float32(math.Inf(-1)), 0.5}
	r := logProbs(l, nil, 2, 0, 3)
	var sum float64
	for _, x := range l {
		sum += math.Exp(float64(x) - logSumExp(l))
	}
	if math.Abs(sum-1) > 1e-6 || math.Abs(float64(r.LogProb)-(2-logSumExp(l))) > 1e-6 {
		t.Fatalf("logprob %g", r.LogProb)
	}
	if len(r.Top) != 3 || r.Top[0].Token != 1 || r.Top[1].Token != 2 || r.Top[2].Token != 0 {
		t.Fatalf("top %+v", r.Top)
	}
	cold := logProbs(l, nil, 1, 0.5, 0)
	if cold.LogProb <= logProbs(l, nil, 1, 1, 0).LogProb {
		t.Fatal("a lower temperature does not sharpen")
	}
	// under a mask, the distribution is the allowed tokens'
	masked := logProbs(l, maskOf(len(l), 0, 2), 2, 0, 5)
	if len(masked.Top) != 2 || math.Abs(math.Exp(float64(masked.Top[0].LogProb))+math.Exp(float64(masked.Top[1].LogProb))-1) > 1e-6 {
		t.Fatalf("masked: %+v", masked)
	}
	var lp LogProbs
	lp.put(4, r)
	if got, ok := lp.Take(4); !ok || got.Token != 2 {
		t.Fatal("take")
	}
	if _, ok := lp.Take(4); ok {
		t.Fatal("taken twice")
	}
}

// BenchmarkSampleMasked128k is a row of a 128k vocabulary sampled (greedy,
// and temperature 1 with top-k 40) without a mask and under masks
// allowing 16 tokens (a JSON key or number) or all but 256 (a string's
// contents): what applying a constraint's mask adds to sampling.
func BenchmarkSampleMasked128k(b *testing.B) {
	const V = 128256
	row := make([]float32, V)
	for i := range row {
		row[i] = float32((i*7919)%1000) / 100
	}
	sparse := maskOf(V)
	for i := range 16 {
		sparse[(i*8009)>>6] |= 1 << ((i * 8009) & 63)
	}
	dense := maskOf(V)
	for i := range dense {
		dense[i] = ^uint64(0)
	}
	for i := range 256 {
		dense[(i*499)>>6] &^= 1 << ((i * 499) & 63)
	}
	logits := make([]float32, V)
	for _, p := range []SamplingParams{{}, {Temperature: 1, TopK: 40}} {
		for _, m := range []struct {
			name string
			mask []uint64
		}{{"none", nil}, {"16", sparse}, {"all-256", dense}} {
			b.Run(fmt.Sprintf("t%g-k%d/%s", p.Temperature, p.TopK, m.name), func(b *testing.B) {
				s, _ := NewSampler(p, nil)
				for b.Loop() {
					copy(logits, row)
					s.SampleMasked(logits, m.mask)
				}
			})
		}
	}
}
