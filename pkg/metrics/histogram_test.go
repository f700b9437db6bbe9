package metrics

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// exactQuantile is the nearest-rank quantile the histogram estimates.
func exactQuantile(sorted []float64, q float64) float64 {
	r := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(r, 1), len(sorted))-1]
}

func TestHistogramRelativeErrorProperty(t *testing.T) {
	gens := []struct {
		name string
		gen  func(r *rand.Rand) float64
	}{
		{"lognormal", func(r *rand.Rand) float64 { return math.Exp(r.NormFloat64()*2 + 3) }},
		{"uniform", func(r *rand.Rand) float64 { return r.Float64() * 1000 }},
		{"exponential", func(r *rand.Rand) float64 { return r.ExpFloat64() * 50 }},
		{"pareto", func(r *rand.Rand) float64 { return 1 / math.Pow(1-r.Float64(), 1/1.2) }},
		{"tiny", func(r *rand.Rand) float64 { return r.Float64() * 1e-6 }},
	}
	qs := []float64{0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1}
	for _, g := range gens {
		t.Run(g.name, func(t *testing.T) {
			for seed := range uint64(20) {
				r := rand.New(rand.NewPCG(seed, 7))
				n := 1 + r.IntN(5000)
				h := NewHistogram(0)
				vals := make([]float64, n)
				for i := range vals {
					vals[i] = g.gen(r)
					h.Record(vals[i])
				}
				slices.Sort(vals)
				for _, q := range qs {
					got, ok := h.Quantile(q)
					want := exactQuantile(vals, q)
					if !ok {
						t.Fatalf("seed %d q %g: not ok", seed, q)
					}
					if want >= minPositive && math.Abs(got-want)/want > 0.01 {
						t.Fatalf("seed %d n %d q %g: got %g want %g (rel %.4f)", seed, n, q, got, want, math.Abs(got-want)/want)
					}
				}
				if h.Count() != uint64(n) {
					t.Fatalf("count %d want %d", h.Count(), n)
				}
				if mn, _ := h.Min(); mn != vals[0] {
					t.Fatalf("min %g want %g", mn, vals[0])
				}
				if mx, _ := h.Max(); mx != vals[n-1] {
					t.Fatalf("max %g want %g", mx, vals[n-1])
				}
			}
		})
	}
}

func TestHistogramEmptyAndEdges(t *testing.T) {
	h := NewHistogram(0)
	if _, ok := h.Quantile(0.5); ok {
		t.Fatal("empty histogram gave a quantile")
	}
	if q := QuantilesOf(h); q.Count != 0 || q.P99 != nil {
		t.Fatalf("empty quantiles %+v", q)
	}
	h.Record(math.NaN())
	h.Record(-3)
	h.Record(0)
	h.Record(5)
	if h.Count() != 3 {
		t.Fatalf("count %d, NaN must be ignored", h.Count())
	}
	if v, _ := h.Quantile(0.1); v != -3 {
		t.Fatalf("low quantile %g want exact min -3", v)
	}
	if _, ok := h.Quantile(1.5); ok {
		t.Fatal("q out of range accepted")
	}
	if err := h.Merge(NewHistogram(0.02)); err != nil {
		t.Fatalf("merging an empty histogram: %v", err)
	}
	o := NewHistogram(0.02)
	o.Record(1)
	if err := h.Merge(o); !errors.Is(err, ErrMergeMismatch) {
		t.Fatalf("merge mismatch err = %v", err)
	}
}

// FuzzHistogramMerge checks that merging equals recording the union.
func FuzzHistogramMerge(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 0, 7}, uint8(3))
	f.Add([]byte{255, 255, 0, 0, 9}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		a, b, u := NewHistogram(0), NewHistogram(0), NewHistogram(0)
		for i := 0; i+1 < len(data); i += 2 {
			// Spread values over many decades, including the zero bucket.
			v := float64(data[i]) * math.Pow(10, float64(int(data[i+1]%24)-12))
			if (i/2)%(int(split%5)+1) == 0 {
				a.Record(v)
			} else {
				b.Record(v)
			}
			u.Record(v)
		}
		m := a.Clone()
		if err := m.Merge(b); err != nil {
			t.Fatal(err)
		}
		if m.Count() != u.Count() || m.zero != u.zero {
			t.Fatalf("count %d/%d zero %d/%d", m.Count(), u.Count(), m.zero, u.zero)
		}
		if math.Abs(m.Sum()-u.Sum()) > 1e-9*math.Abs(u.Sum())+1e-300 {
			t.Fatalf("sum %g want %g", m.Sum(), u.Sum())
		}
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
			x, okx := m.Quantile(q)
			y, oky := u.Quantile(q)
			if okx != oky || x != y {
				t.Fatalf("q %g: merged %g union %g", q, x, y)
			}
		}
		if a.Count()+b.Count() != m.Count() {
			t.Fatal("Merge changed its argument or lost values")
		}
	})
}

func BenchmarkHistogramRecord(b *testing.B) {
	h := NewHistogram(0)
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([]float64, 1024)
	for i := range vals {
		vals[i] = math.Exp(r.NormFloat64() + 3)
	}
	for i := 0; b.Loop(); i++ {
		h.Record(vals[i&1023])
	}
}
