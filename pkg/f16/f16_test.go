package f16

import (
	"math"
	"testing"
)

func TestF16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := ToFloat32(uint16(h))
		back := FromFloat32(f)
		if math.IsNaN(float64(f)) {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
}

func TestF16Rounding(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},
		{65520, 0x7c00},                  // halfway to the next (absent) value: rounds to Inf
		{1e9, 0x7c00},                    // overflow
		{float32(math.Ldexp(1, -24)), 1}, // smallest subnormal
		{float32(math.Ldexp(1, -25)), 0}, // halfway to it: ties to even (zero)
		{float32(math.Ldexp(3, -26)), 1}, // above halfway
		{float32(math.Ldexp(1, -14)), 0x0400},
		{1 + float32(math.Ldexp(1, -11)), 0x3c00}, // tie: even mantissa stays
		{1 + float32(math.Ldexp(3, -11)), 0x3c02}, // tie: odd mantissa rounds up
		{float32(math.Inf(-1)), 0xfc00},
	}
	for _, tc := range tests {
		if got := FromFloat32(tc.in); got != tc.want {
			t.Errorf("FromFloat32(%g) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
}

func TestBF16(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{-3.5, 0xc060},
		{1 + float32(math.Ldexp(1, -8)), 0x3f80}, // tie to even
		{1 + float32(math.Ldexp(3, -8)), 0x3f82},
		{float32(math.Inf(1)), 0x7f80},
	}
	for _, tc := range tests {
		if got := BFloat16FromFloat32(tc.in); got != tc.want {
			t.Errorf("BFloat16FromFloat32(%g) = %#04x, want %#04x", tc.in, got, tc.want)
		}
		if back := BFloat16ToFloat32(tc.want); BFloat16FromFloat32(back) != tc.want {
			t.Errorf("BF16 %#04x does not round-trip", tc.want)
		}
	}
	if nan := BFloat16FromFloat32(float32(math.NaN())); !math.IsNaN(float64(BFloat16ToFloat32(nan))) {
		t.Errorf("NaN became %#04x", nan)
	}
}

// FuzzFromFloat32: the nearest half is never farther than any other, and
// converting back and again changes nothing.
func FuzzFromFloat32(f *testing.F) {
	for _, v := range []float32{0, 1, -2.5, 65504, 65520, 1e-7, 6.1035156e-05} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float32) {
		h := FromFloat32(v)
		// Narrow, vector path and tail, gives the same bits
		many, got := []float32{v, v, v, v, v, v, v, v, v}, make([]uint16, 9)
		Narrow(got, many)
		for i, g := range got {
			if g != h {
				t.Fatalf("Narrow(%v) element %d = %#04x, FromFloat32 %#04x", v, i, g, h)
			}
		}
		back := ToFloat32(h)
		if math.IsNaN(float64(v)) {
			if !math.IsNaN(float64(back)) {
				t.Fatalf("NaN -> %#04x", h)
			}
			return
		}
		if FromFloat32(back) != h {
			t.Fatalf("%v -> %#04x -> %v -> %#04x", v, h, back, FromFloat32(back))
		}
		if math.IsInf(float64(back), 0) {
			return
		}
		d := math.Abs(float64(back) - float64(v))
		for _, n := range []uint16{h + 1, h - 1} {
			if o := ToFloat32(n); !math.IsNaN(float64(o)) && !math.IsInf(float64(o), 0) && math.Signbit(float64(o)) == math.Signbit(float64(back)) {
				if math.Abs(float64(o)-float64(v)) < d {
					t.Fatalf("%v -> %#04x (%v), but %#04x (%v) is nearer", v, h, back, n, o)
				}
			}
		}
	})
}

// TestNarrowMatchesFromFloat32: Narrow's in-line rounding gives
// FromFloat32's bits for every float32 at a stride through all of them
// and around each float16 boundary (normal range ends, ties, overflow).
func TestNarrowMatchesFromFloat32(t *testing.T) {
	var xs []float32
	for b := uint64(0); b < 1<<32; b += 4093 {
		xs = append(xs, math.Float32frombits(uint32(b)))
	}
	for _, edge := range []float32{0x1p-14, 0x1p-15, 0x1p15, 65504, 65519, 65520, 1 + 0x1p-11, 1 + 0x3p-11, 2048 + 1, 2048 + 3} {
		for _, s := range []float32{1, -1} {
			b := math.Float32bits(s * edge)
			for d := uint32(0); d < 5; d++ {
				xs = append(xs, math.Float32frombits(b-d), math.Float32frombits(b+d))
			}
		}
	}
	for name, narrow := range map[string]func([]uint16, []float32){"Narrow": Narrow, "narrowGeneric": narrowGeneric} {
		got := make([]uint16, len(xs))
		narrow(got, xs)
		bad := 0
		for i, x := range xs {
			if want := FromFloat32(x); got[i] != want {
				if bad++; bad <= 5 {
					t.Errorf("%s(%g = %#x) = %#x, want %#x", name, x, math.Float32bits(x), got[i], want)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d values differ from the codec", name, bad, len(xs))
		}
	}
}

// TestNarrowNaNsAndTails: a NaN anywhere in a slice of any length (the
// vector path's eights, the eight it leaves to Go, the tail) comes out as
// FromFloat32's quiet NaN, and every other value as FromFloat32 has it;
// nothing past len(src) is written.
func TestNarrowNaNsAndTails(t *testing.T) {
	nans := []float32{float32(math.NaN()), math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00123)}
	for n := range 41 {
		for at := -1; at < n; at++ {
			src := make([]float32, n)
			for i := range src {
				src[i] = float32(i)*1.37 - 20
			}
			if at >= 0 {
				src[at] = nans[at%len(nans)]
			}
			dst := make([]uint16, n+1)
			dst[n] = 0xbeef
			Narrow(dst, src)
			for i, x := range src {
				if want := FromFloat32(x); dst[i] != want {
					t.Fatalf("n %d, NaN at %d: element %d (%g) = %#x, want %#x", n, at, i, x, dst[i], want)
				}
			}
			if dst[n] != 0xbeef {
				t.Fatalf("n %d: Narrow wrote past the source's length", n)
			}
		}
	}
}

// BenchmarkNarrow: a float16 KV cache's keys on their way in (normal-range
// values), by Narrow and by a FromFloat32 call per element.
func BenchmarkNarrow(b *testing.B) {
	src := make([]float32, 4096)
	for i := range src {
		src[i] = float32(math.Sin(float64(i))) * 3
	}
	dst := make([]uint16, len(src))
	b.Run("narrow", func(b *testing.B) {
		b.SetBytes(int64(4 * len(src)))
		for b.Loop() {
			Narrow(dst, src)
		}
	})
	b.Run("each", func(b *testing.B) {
		b.SetBytes(int64(4 * len(src)))
		for b.Loop() {
			for i, x := range src {
				dst[i] = FromFloat32(x)
			}
		}
	})
}
