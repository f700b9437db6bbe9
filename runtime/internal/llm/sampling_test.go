package llm

import (
	"errors"
	"math"
	"testing"
)

func TestSamplingValidate(t *testing.T) {
	bad := []SamplingParams{
		{Temperature: -1}, {TopK: -1}, {TopP: 1.5}, {MinP: -0.1},
		{RepetitionPenalty: -2}, {Temperature: float32(math.NaN())},
	}
	for _, p := range bad {
		if err := validateSampling(p); !errors.Is(err, ErrBadSampling) {
			t.Errorf("%+v: got %v, want ErrBadSampling", p, err)
		}
	}
	if _, err := NewSampler(SamplingParams{TopP: 2}, nil); !errors.Is(err, ErrBadSampling) {
		t.Errorf("NewSampler accepted top_p 2: %v", err)
	}
}

func TestGreedyPicksFirstMax(t *testing.T) {
	s, _ := NewSampler(SamplingParams{}, nil)
	if got := s.Sample([]float32{1, 3, 3, 2}); got != 1 {
		t.Fatalf("greedy = %d, want 1", got)
	}
}

func TestSeededSamplingIsDeterministic(t *testing.T) {
	logits := func() []float32 {
		l := make([]float32, 1000)
		for i := range l {
			l[i] = float32(math.Sin(float64(i)))
		}
		return l
	}
	p := SamplingParams{Temperature: 0.9, TopK: 50, TopP: 0.9, MinP: 0.01, Seed: 7}
	draw := func() []int32 {
		s, _ := NewSampler(p, nil)
		var out []int32
		for range 20 {
			tok := s.Sample(logits())
			s.Observe(tok)
			out = append(out, tok)
		}
		return out
	}
	a, b := draw(), draw()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seeded runs differ at %d: %v vs %v", i, a, b)
		}
	}
}

func TestFiltersRestrictSupport(t *testing.T) {
	logits := []float32{5, 4, 0, -1, -2}
	cases := []struct {
		name  string
		p     SamplingParams
		allow map[int32]bool
	}{
		{"top_k 2", SamplingParams{Temperature: 1, TopK: 2}, map[int32]bool{0: true, 1: true}},
		{"top_p 0.5", SamplingParams{Temperature: 1, TopP: 0.5}, map[int32]bool{0: true}},
		{"min_p 0.2", SamplingParams{Temperature: 1, MinP: 0.2}, map[int32]bool{0: true, 1: true}},
	}
	for _, c := range cases {
		for seed := range uint64(200) {
			c.p.Seed = seed
			s, _ := NewSampler(c.p, nil)
			if tok := s.Sample(append([]float32(nil), logits...)); !c.allow[tok] {
				t.Fatalf("%s: sampled %d outside %v", c.name, tok, c.allow)
			}
		}
	}
}

func TestTemperatureFollowsDistribution(t *testing.T) {
	// logits ln(1), ln(3): expect ~25% / 75%.
	n, ones := 4000, 0
	s, _ := NewSampler(SamplingParams{Temperature: 1, Seed: 1}, nil)
	for range n {
		tok := s.Sample([]float32{0, float32(math.Log(3))})
		s.Observe(tok)
		if tok == 1 {
			ones++
		}
	}
	if f := float64(ones) / float64(n); math.Abs(f-0.75) > 0.03 {
		t.Fatalf("P(1) = %.3f, want 0.75±0.03", f)
	}
}

func TestPenalties(t *testing.T) {
	s, _ := NewSampler(SamplingParams{RepetitionPenalty: 2, PresencePenalty: 0.5, FrequencyPenalty: 0.25}, []int32{0})
	s.Observe(1)
	s.Observe(1)
	l := []float32{4, 4, -1, 3}
	s.applyPenalties(l)
	// token 0: prompt only → 4/2 = 2; token 1: seen → 4/2=2, then −0.5 −0.25·2 = 1
	want := []float32{2, 1, -1, 3}
	for i := range l {
		if math.Abs(float64(l[i]-want[i])) > 1e-6 {
			t.Fatalf("penalised logits %v, want %v", l, want)
		}
	}
}

func BenchmarkSampleTopP32k(b *testing.B) {
	l := make([]float32, 32000)
	for i := range l {
		l[i] = float32(math.Sin(float64(i) * 0.37))
	}
	s, _ := NewSampler(SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: 1}, nil)
	buf := make([]float32, len(l))
	for b.Loop() {
		copy(buf, l)
		s.Sample(buf)
	}
}

func BenchmarkGreedy32k(b *testing.B) {
	l := make([]float32, 32000)
	s, _ := NewSampler(SamplingParams{}, nil)
	for b.Loop() {
		s.Sample(l)
	}
}

func TestRebuiltSamplerDrawsTheSame(t *testing.T) {
	logits := func(i int) []float32 {
		l := make([]float32, 64)
		for j := range l {
			l[j] = float32(math.Cos(float64(i*7 + j)))
		}
		return l
	}
	p := SamplingParams{Temperature: 1, TopK: 20, Seed: 42}
	a, _ := NewSampler(p, []int32{1, 2})
	var toks []int32
	for i := range 10 {
		tok := a.Sample(logits(i))
		a.Observe(tok)
		toks = append(toks, tok)
	}
	// rebuild after 5 tokens, as a preempted sequence is
	b, _ := NewSampler(p, []int32{1, 2})
	for _, tok := range toks[:5] {
		b.Observe(tok)
	}
	for i := 5; i < 10; i++ {
		tok := b.Sample(logits(i))
		b.Observe(tok)
		if tok != toks[i] {
			t.Fatalf("draw %d after rebuild = %d, want %d", i, tok, toks[i])
		}
	}
}
