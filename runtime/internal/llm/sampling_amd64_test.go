package llm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpWeightsVector: the AVX-512 and the AVX2 loops give the Go loop's
// values bit for bit — over random logits, the edges of the range, −Inf,
// +Inf and NaN, every length from 0 to 40 (their tails) — and the same sum
// to rounding; with AVX-512 on (where the CPU has it) and off.
func TestExpWeightsVector(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2")
	}
	defer func(on bool) { useAVX512 = on }(useAVX512)
	for _, avx512 := range []bool{useAVX512, false} {
		useAVX512 = avx512
		t.Run(map[bool]string{true: "avx512", false: "avx2"}[avx512], expWeightsVector)
	}
}

func expWeightsVector(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	specials := []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), 0, -87.33654, -87.33655, -87.3, -100, -1e30,
		math.Nextafter32(-87.33654, 0), 1e-30, -1e-30}
	for n := range 41 {
		for trial := range 20 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64() * 20)
				if trial%3 == 0 && i%5 == 0 {
					x[i] = specials[(i/5+trial)%len(specials)]
				}
			}
			inv := float32(0.3 + r.Float64()*2)
			goSide, vec := make([]float32, n), make([]float32, n)
			want := expWeightsGo(goSide, x, 0, inv)
			got := expWeights(vec, x, 0, inv)
			for i := range x {
				if math.Float32bits(vec[i]) != math.Float32bits(goSide[i]) {
					t.Fatalf("n %d: weight %d of logit %g: AVX2 %v, Go %v", n, i, x[i], vec[i], goSide[i])
				}
			}
			if !(got == want || math.Abs(got-want) <= 1e-12*math.Abs(want) || (math.IsNaN(got) && math.IsNaN(want))) {
				t.Fatalf("n %d: sum %g, Go's %g", n, got, want)
			}
		}
	}
}
