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

// TestMax: Max is the value at Argmax's index on the vector path and the
// Go one — NaNs never the maximum, −Inf for none — at lengths around the
// vector path's blocks.
func TestMax(t *testing.T) {
	inf, nan := float32(math.Inf(-1)), float32(math.NaN())
	for _, tc := range []struct {
		x    []float32
		want float32
	}{{nil, inf}, {[]float32{nan}, inf}, {[]float32{inf, nan}, inf}, {[]float32{nan, 2, 5, nan, 5}, 5}} {
		if got := Max(tc.x); got != tc.want {
			t.Fatalf("Max(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 31, 32, 33, 95, 1000, 32000} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
			if r.IntN(7) == 0 {
				x[i] = nan
			}
		}
		if want := x[Argmax(x)]; want == want && Max(x) != want {
			t.Fatalf("n %d: Max %v, Argmax's value %v", n, Max(x), want)
		}
		if got, want := maxOf(x), maxGeneric(x); got != want && !(got != got && want != want) {
			t.Fatalf("n %d: vector path %v, Go %v", n, got, want)
		}
	}
}
