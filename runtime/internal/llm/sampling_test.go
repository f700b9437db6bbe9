package llm

import (
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
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

// TestSampleMaskedArgmax: the argmax a graph gives is the token exactly
// where SampleMasked would take the row's argmax as it came — greedy, no
// penalty, no mask — and is not read elsewhere. The hint is planted wrong
// (token 1, where the row's largest is 3), so a pick that took it where it
// must not, or read the row where it need not, shows.
func TestSampleMaskedArgmax(t *testing.T) {
	row := func() []float32 { return []float32{0, 1, 2, 9, 3, 4, 5, 6} }
	for _, c := range []struct {
		p      SamplingParams
		mask   []uint64
		argmax int
		want   int32
	}{
		{SamplingParams{}, nil, 1, 1},
		{SamplingParams{RepetitionPenalty: 1, TopK: 5, TopP: 0.9}, nil, 1, 1},
		{SamplingParams{}, nil, -1, 3},
		{SamplingParams{}, nil, 8, 3},                      // outside the row
		{SamplingParams{}, []uint64{0b0111_0111}, 1, 6},    // tokens 3 and 7 left out
		{SamplingParams{RepetitionPenalty: 2}, nil, 1, 7},  // token 3 was in the prompt: 9/2 < 6
		{SamplingParams{PresencePenalty: 0.5}, nil, 1, 3},  // no output yet: nothing to apply, but not taken
		{SamplingParams{FrequencyPenalty: 0.5}, nil, 1, 3}, // likewise
		{SamplingParams{Temperature: 0.01, Seed: 1}, nil, 1, 3},
	} {
		s, err := NewSampler(c.p, []int32{3})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.SampleMaskedArgmax(row(), c.mask, c.argmax); got != c.want {
			t.Errorf("%+v, mask %v, argmax %d: token %d, want %d", c.p, c.mask, c.argmax, got, c.want)
		}
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

// BenchmarkSampleFullVocab samples a 32k row with each common filter set:
// temperature alone (the OpenAI API's default), top-p or min-p without
// top-k (what an OpenAI client sends), and llama.cpp's top-k 40 — on a
// peaked row (logits of spread 3, as a trained model's are: the top-p cut
// keeps a few dozen tokens) and a flat one (thousands of near-equal
// logits: the cut keeps thousands).
func BenchmarkSampleFullVocab(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	peaked, flat := make([]float32, 32000), make([]float32, 32000)
	for i := range peaked {
		peaked[i] = float32(r.NormFloat64() * 3)
		flat[i] = float32(math.Sin(float64(i)*0.37)) * 8
	}
	for _, row := range []struct {
		name   string
		logits []float32
	}{{"peaked", peaked}, {"flat", flat}} {
		for _, p := range []struct {
			name string
			sp   SamplingParams
		}{
			{"t1", SamplingParams{Temperature: 1, Seed: 1}},
			{"t0.8-p0.95", SamplingParams{Temperature: 0.8, TopP: 0.95, Seed: 1}},
			{"t0.7-minp0.05", SamplingParams{Temperature: 0.7, MinP: 0.05, Seed: 1}},
			{"t0.8-k40-p0.95", SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: 1}},
		} {
			b.Run(row.name+"/"+p.name, func(b *testing.B) {
				s, _ := NewSampler(p.sp, nil)
				buf := make([]float32, len(row.logits))
				for b.Loop() {
					copy(buf, row.logits)
					s.Sample(buf)
				}
			})
		}
	}
}

// TestNucleusMatchesFullSort: what top-p and min-p keep, found without a
// sort, is what sorting the whole row keeps — the candidates at or above
// the min-p floor, most likely first (ties by token id), until their mass
// reaches top-p — token for token, in token order, on peaked, flat, tied
// and smooth rows, with top-p alone, min-p alone and both, and with top-p
// set where the sorted mass crosses from one float32 binade to the next.
// Only where top-p lies within a rounding of a cumulative sum may the two
// differ by that one token.
func TestNucleusMatchesFullSort(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	rows := map[string]func(i int) float32{
		"peaked": func(int) float32 { return float32(r.NormFloat64() * 3) },
		"flat":   func(i int) float32 { return float32(math.Sin(float64(i)*0.37)) * 8 },
		"tied":   func(int) float32 { return float32(r.IntN(6)) },
		"smooth": func(i int) float32 { return float32(-i) * 0.01 },
	}
	for name, gen := range rows {
		for _, n := range []int{5, 300, 32000} {
			for _, p := range []SamplingParams{{Temperature: 1, TopP: 0.9}, {Temperature: 0.6, TopP: 0.5}, {Temperature: 2, TopP: 0.999},
				{Temperature: 1, MinP: 0.05}, {Temperature: 0.8, MinP: 0.3, TopP: 0.95}, {Temperature: 1.5, MinP: 1e-6, TopP: 0.99}} {
				// weights as the sampler has them: the largest 1, the
				// rest e^((l − max)/T), and their total
				c, g := make([]candidate, n), make([]float64, n)
				gmax := math.Inf(-1)
				for i := range g {
					g[i] = float64(gen(i)) // once: a row may draw at random
					gmax = max(gmax, g[i])
				}
				var sum float64
				for i := range c {
					c[i] = candidate{int32(i), float32(math.Exp((g[i] - gmax) / float64(p.Temperature)))}
					sum += float64(c[i].p)
				}
				sorted := slices.Clone(c)
				slices.SortFunc(sorted, func(a, b candidate) int {
					if c := cmp.Compare(b.p, a.p); c != 0 {
						return c
					}
					return cmp.Compare(a.id, b.id)
				})
				ps := []SamplingParams{p}
				var acc float64
				for i, x := range sorted {
					acc += float64(x.p)
					if len(ps) < 13 && i+1 < len(sorted) && math.Float32bits(sorted[i+1].p)>>23 != math.Float32bits(x.p)>>23 && acc < sum && p.MinP == 0 {
						at := float32(acc / sum)
						for _, tp := range []float32{at, math.Nextafter32(at, 0), math.Nextafter32(at, 1)} {
							q := p
							q.TopP = tp
							ps = append(ps, q)
						}
					}
				}
				for _, q := range ps {
					want, edge := nucleusBySort(sorted, q, sum)
					s, err := NewSampler(q, nil)
					if err != nil {
						t.Fatal(err)
					}
					got := nucleusOf(t, s, c, sum)
					if !slices.Equal(got, want) && !(edge && absInt(len(got)-len(want)) == 1) {
						t.Fatalf("%s row of %d, %+v: nucleus kept %d candidates, the full sort %d (first difference at %d)",
							name, n, q, len(got), len(want), firstDifference(got, want))
					}
				}
			}
		}
	}
}

// nucleusBySort is the top-p / min-p cut of weights (summing to total)
// sorted most likely first, in token order, and whether top-p's mass lay
// within a rounding of the sum at the cut.
func nucleusBySort(sorted []candidate, p SamplingParams, total float64) (kept []candidate, edge bool) {
	floor := float32(0)
	if p.MinP > 0 {
		floor = p.MinP * sorted[0].p
	}
	var acc float64
	target := float64(p.TopP) * total
	for _, x := range sorted {
		if x.p < floor || x.p <= 0 {
			break
		}
		kept = append(kept, x)
		acc += float64(x.p)
		if p.TopP > 0 && p.TopP < 1 && acc >= target {
			edge = acc-target < 1e-12*total || acc-float64(x.p)-target > -1e-12*total
			break
		}
	}
	slices.SortFunc(kept, func(a, b candidate) int { return cmp.Compare(a.id, b.id) })
	return kept, edge
}

func absInt(x int) int { return max(x, -x) }

// nucleusOf is s.nucleus over candidates: their ids and weights apart,
// what it keeps put back together, checking the total it reports is the
// kept weights'.
func nucleusOf(t *testing.T, s *Sampler, c []candidate, total float64) []candidate {
	t.Helper()
	ids, w := make([]int32, len(c)), make([]float32, len(c))
	for i, x := range c {
		ids[i], w[i] = x.id, x.p
	}
	keptIDs, keptW, keptTotal := s.nucleus(ids, w, total)
	kept, sum := make([]candidate, len(keptIDs)), 0.0
	for i := range kept {
		kept[i] = candidate{keptIDs[i], keptW[i]}
		sum += float64(keptW[i])
	}
	if keptTotal != sum {
		t.Fatalf("nucleus reported a total of %v for weights summing to %v", keptTotal, sum)
	}
	return kept
}

// weightsOf is the weights of candidates.
func weightsOf(c []candidate) []float32 {
	w := make([]float32, len(c))
	for i, x := range c {
		w[i] = x.p
	}
	return w
}

func firstDifference(a, b []candidate) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// exp32 is expWeights' exponential of one value.
func exp32(x float32) float32 {
	w := []float32{x}
	expWeights(w, w, 0, 1)
	return w[0]
}

// TestExpWeights: the softmax's exp is within two float32 ulp of math.Exp
// over the exponents it meets ([−87.3, 0] and beyond), 0 below the normal
// range and for −Inf, NaN for NaN; the sum is the values'.
func TestExpWeights(t *testing.T) {
	worst := 0.0
	for i := 0; i <= 2_000_000; i++ {
		x := -90 * float32(i) / 2_000_000
		got, want := float64(exp32(x)), math.Exp(float64(x))
		if x < -87.33654 {
			if got != 0 {
				t.Fatalf("exp32(%g) = %g, want 0 below the normal range", x, got)
			}
			continue
		}
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
		worst = max(worst, math.Abs(got-want)/ulp)
	}
	t.Logf("worst error %.2f ulp", worst)
	if worst > 2 {
		t.Errorf("exp32 is %.2f ulp from math.Exp, want at most 2", worst)
	}
	if e := exp32(float32(math.Inf(-1))); e != 0 {
		t.Errorf("exp32(-Inf) = %g, want 0", e)
	}
	if e := exp32(float32(math.NaN())); e == e {
		t.Errorf("exp32(NaN) = %g, want NaN", e)
	}
	x := []float32{1, 2, 0, -3, 2}
	w := make([]float32, len(x))
	sum := expWeights(w, x, 2, 0.5)
	want := 0.0
	for _, p := range w {
		want += float64(p)
	}
	if sum != want || w[1] != 1 || math.Abs(float64(w[0])-math.Exp(-0.5)) > 1e-7 {
		t.Errorf("expWeights: %v, sum %g; want e^((l−2)/2) each, sum %g", w, sum, want)
	}
}

// A row of NaN logits (a broken model) still yields a token, with every
// filter set, rather than a panic.
func TestNaNRowSamples(t *testing.T) {
	for _, p := range []SamplingParams{{Temperature: 1}, {Temperature: 1, TopP: 0.9}, {Temperature: 1, MinP: 0.1}, {Temperature: 1, TopK: 5, TopP: 0.5}} {
		s, err := NewSampler(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		row := make([]float32, 100)
		for i := range row {
			row[i] = float32(math.NaN())
		}
		if tok := s.Sample(row); tok < 0 || tok >= 100 {
			t.Errorf("%+v: token %d from a NaN row", p, tok)
		}
	}
}

// TestDrawMatchesWalk: draw, which sums blocks of weights before walking
// one, picks what one walk over every weight picks — rows shorter and
// longer than a block, zeros among the weights, r near the total — and a
// row with a NaN weight its last candidate not ≤ 0.
func TestDrawMatchesWalk(t *testing.T) {
	walk := func(c []candidate, r float64) int32 {
		last := c[0].id
		for _, x := range c {
			if x.p <= 0 {
				continue
			}
			last = x.id
			r -= float64(x.p)
			if r < 0 {
				return x.id
			}
		}
		return last
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{1, drawBlock - 1, drawBlock, drawBlock + 1, 3*drawBlock + 5, 32000} {
		c := make([]candidate, n)
		var total float64
		for i := range c {
			p := rng.Float32()
			if rng.IntN(4) == 0 {
				p = 0
			}
			c[i] = candidate{int32(i), p}
			total += float64(p)
		}
		rs := []float64{0, total * (1 - 1e-9), total}
		for range 200 {
			rs = append(rs, rng.Float64()*total)
		}
		for _, r := range rs {
			if got, want := c[drawAt(weightsOf(c), r)].id, walk(c, r); got != want {
				t.Fatalf("row of %d, r %v of %v: draw picked %d, the walk %d", n, r, total, got, want)
			}
		}
	}
	if got := drawAt([]float32{0.5, float32(math.NaN()), 0}, math.NaN()); got != 1 {
		t.Fatalf("a row with a NaN weight: draw picked %d, want 1 (its last candidate not ≤ 0)", got)
	}
}

// TestNucleusDrawDistribution: top-p sampling, which draws from the whole
// row and keeps a draw inside the nucleus (nucleusDraw) before it falls
// back on cutting the nucleus, draws each token of the nucleus with its
// weight over the nucleus's mass, and nothing else: 20,000 seeded draws
// against the cut by the threshold (itself checked against a full sort)
// by a chi-square statistic, on a row of many equal logits, with and
// without min-p, for top-p where nearly every draw falls inside and
// where many take the fallback.
func TestNucleusDrawDistribution(t *testing.T) {
	const V, draws = 200, 20000
	logits := make([]float32, V)
	for i := range logits {
		logits[i] = float32(i*7919%23) / 4 // 23 values: ties at every cut
	}
	for _, p := range []SamplingParams{{Temperature: 1, TopP: 0.9}, {Temperature: 0.7, TopP: 0.6, MinP: 0.05}, {Temperature: 1.3, TopP: 0.5}, {Temperature: 1, TopP: 0.97}} {
		// the nucleus and its weights, as the threshold cuts them
		ref, _ := NewSampler(p, nil)
		w := make([]float32, V)
		total := expWeights(w, logits, slices.Max(logits), 1/p.Temperature)
		want := map[int32]float64{}
		var mass float64
		keptIDs, keptW, _ := ref.nucleus(nil, w, total)
		for i, id := range keptIDs {
			x := candidate{id, keptW[i]}
			want[x.id] = float64(x.p)
			mass += float64(x.p)
		}
		got := map[int32]int{}
		fallbacks := 0
		for seed := range uint64(draws) {
			q := p
			q.Seed = seed
			s, _ := NewSampler(q, nil)
			tok := s.Sample(slices.Clone(logits))
			if _, ok := want[tok]; !ok {
				t.Fatalf("%+v seed %d: drew %d, outside the nucleus of %d tokens", p, seed, tok, len(want))
			}
			got[tok]++
			s2, _ := NewSampler(q, nil)
			if _, ok := s2.nucleusDraw(w, total); !ok {
				fallbacks++
			}
		}
		var chi2 float64
		for id, w := range want {
			e := draws * w / mass
			chi2 += (float64(got[id]) - e) * (float64(got[id]) - e) / e
		}
		df := float64(len(want) - 1)
		t.Logf("%+v: nucleus of %d tokens, chi-square %.1f on %.0f degrees of freedom; nucleusDraw alone fell outside twice in %d of %d tries",
			p, len(want), chi2, df, fallbacks, draws)
		if chi2 > df+6*math.Sqrt(2*df) {
			t.Fatalf("%+v: chi-square %.1f on %.0f degrees of freedom: the draws are not the nucleus's weights", p, chi2, df)
		}
	}
}
