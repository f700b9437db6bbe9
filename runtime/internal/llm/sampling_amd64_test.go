package llm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpScaledVector: the AVX2 loop gives the Go loop's values bit for bit
// — over random logits, the edges of the range, −Inf, +Inf and NaN, every
// length from 0 to 40 (its tails) — and the same sum to rounding.
func TestExpScaledVector(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(3, 4))
	specials := []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), 0, -87.33654, -87.33655, -87.3, -100, -1e30,
		math.Nextafter32(-87.33654, 0), 1e-30, -1e-30}
	for n := range 41 {
		for trial := range 20 {
			c := make([]candidate, n)
			for i := range c {
				c[i] = candidate{int32(i), float32(r.NormFloat64() * 20)}
				if trial%3 == 0 && i%5 == 0 {
					c[i].p = specials[(i/5+trial)%len(specials)]
				}
			}
			inv := float32(0.3 + r.Float64()*2)
			goSide, vec := append([]candidate(nil), c...), append([]candidate(nil), c...)
			want := expScaledGo(goSide, 0, inv)
			got := expScaled(vec, 0, inv)
			for i := range c {
				if vec[i].id != goSide[i].id || math.Float32bits(vec[i].p) != math.Float32bits(goSide[i].p) {
					t.Fatalf("n %d: candidate %d of logit %g: AVX2 %v, Go %v", n, i, c[i].p, vec[i], goSide[i])
				}
			}
			if !(got == want || math.Abs(got-want) <= 1e-12*math.Abs(want) || (math.IsNaN(got) && math.IsNaN(want))) {
				t.Fatalf("n %d: sum %g, Go's %g", n, got, want)
			}
		}
	}
}
