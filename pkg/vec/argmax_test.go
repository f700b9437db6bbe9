package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestArgmaxMatchesNaive checks Argmax (the vector path where the CPU has
// one) and the eight-lane Go loop against the plain loop on random rows
// with ties, NaNs, infinities, signed zeros and lengths around the vector
// path's blocks of 32 and 8, and on vocabulary-sized rows whose maximum
// sits anywhere, the tail included.
func TestArgmaxMatchesNaive(t *testing.T) {
	naive := func(x []float32) int {
		best, bi := float32(math.Inf(-1)), 0
		for i, v := range x {
			if v > best {
				best, bi = v, i
			}
		}
		return bi
	}
	check := func(x []float32) {
		t.Helper()
		want := naive(x)
		if got := Argmax(x); got != want {
			t.Fatalf("Argmax(%d values) = %d, want %d (%v)", len(x), got, want, x[:min(len(x), 80)])
		}
		if got := argmaxGeneric(x); got != want {
			t.Fatalf("argmaxGeneric(%d values) = %d, want %d", len(x), got, want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	negZero := float32(math.Copysign(0, -1))
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, negZero, 3}
	for n := range 300 {
		for range 30 {
			x := make([]float32, n)
			for i := range x {
				switch r.IntN(6) {
				case 0:
					x[i] = specials[r.IntN(len(specials))]
				default:
					x[i] = float32(r.IntN(7)) - 3 // many ties
				}
			}
			check(x)
		}
	}
	for _, n := range []int{32000, 32001, 32007, 32031} {
		x := make([]float32, n)
		for range 40 {
			for i := range x {
				x[i] = r.Float32()*20 - 10
			}
			at := r.IntN(n)
			if r.IntN(4) == 0 {
				at = n - 1 - r.IntN(min(n, 40)) // in or near the tail
			}
			x[at] = 11
			if r.IntN(3) == 0 { // a tie after it
				x[min(n-1, at+1+r.IntN(100))] = 11
			}
			check(x)
		}
	}
}

// BenchmarkArgmax is argmax over a 32k row of random logits, each path.
func BenchmarkArgmax(b *testing.B) {
	x := make([]float32, 32000)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = r.Float32()*20 - 10
	}
	b.Run("argmax", func(b *testing.B) {
		for b.Loop() {
			Argmax(x)
		}
	})
	b.Run("generic", func(b *testing.B) {
		for b.Loop() {
			argmaxGeneric(x)
		}
	})
}
