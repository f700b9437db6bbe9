package safetensors

import (
	"math"
	"testing"
)

func TestF16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToFloat32(uint16(h))
		back := Float32ToF16(f)
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
		if got := Float32ToF16(tc.in); got != tc.want {
			t.Errorf("Float32ToF16(%g) = %#04x, want %#04x", tc.in, got, tc.want)
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
		if got := Float32ToBF16(tc.in); got != tc.want {
			t.Errorf("Float32ToBF16(%g) = %#04x, want %#04x", tc.in, got, tc.want)
		}
		if back := BF16ToFloat32(tc.want); Float32ToBF16(back) != tc.want {
			t.Errorf("BF16 %#04x does not round-trip", tc.want)
		}
	}
	if nan := Float32ToBF16(float32(math.NaN())); !math.IsNaN(float64(BF16ToFloat32(nan))) {
		t.Errorf("NaN became %#04x", nan)
	}
}
