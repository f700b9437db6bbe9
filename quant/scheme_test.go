package quant

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestParseScheme(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		err  error
	}{
		{"int4-b32", "int4-b32-acc4", nil},
		{"int4-b128", "int4-b128-acc4", nil},
		{"INT8", "int8-b32-acc4", nil},
		{"int4-b32-asym-acc1", "int4-b32-asym-acc1", nil},
		{"fp16", "fp16", nil},
		{"int8-pc", "int8-pc", nil},
		{"int8-pc-asym", "", ErrScheme},
		{"int4-pc", "", ErrScheme},
		{"int4-b24", "", ErrScheme},
		{"int4-acc9", "", ErrScheme},
		{"fp16-b32", "", ErrScheme},
		{"qdq-int8", "", ErrScheme},
		{"", "", ErrScheme},
	} {
		s, err := ParseScheme(tc.in)
		if !errors.Is(err, tc.err) {
			t.Errorf("%q: err %v, want %v", tc.in, err, tc.err)
			continue
		}
		if err == nil && s.String() != tc.want {
			t.Errorf("%q: %q, want %q", tc.in, s, tc.want)
		}
	}
}

func FuzzParseScheme(f *testing.F) {
	for _, s := range []string{"int4-b32", "int8-asym-acc1", "fp16", "int4-b", "int4-acc-1", "int8-pc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := ParseScheme(s)
		if err != nil {
			return
		}
		back, err := ParseScheme(sc.String())
		if err != nil || back != sc {
			t.Fatalf("%q → %q → %+v, %v", s, sc, back, err)
		}
	})
}

// TestBlockwiseRoundTrip checks error bounds per format: symmetric error
// is at most half a step (a full step past the top positive code, which the
// block's largest magnitude does not use when it is negative), int8 much smaller, and
// constant/zero blocks are exact.
func TestBlockwiseRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const n, k = 16, 96
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	for i := 0; i < k; i++ {
		w[i] = 0 // an all-zero row
	}
	for _, tc := range []struct {
		bits, bs int
		asym     bool
		maxRel   float64
	}{{4, 32, false, 0.12}, {4, 32, true, 0.12}, {4, 64, false, 0.13}, {8, 32, false, 0.01}, {8, 128, true, 0.01}, {4, 128, false, 0.14}} {
		q, err := QuantizeBlockwise(w, n, k, tc.bits, tc.bs, tc.asym)
		if err != nil {
			t.Fatal(err)
		}
		dq := q.Dequantize()
		if e := RelativeRMS(w, dq); e > tc.maxRel || e == 0 {
			t.Errorf("bits %d block %d asym %v: rel rms %.4f", tc.bits, tc.bs, tc.asym, e)
		}
		for i := 0; i < k; i++ {
			if dq[i] != 0 {
				t.Fatalf("zero row dequantised to %v", dq[i])
			}
		}
		nb := q.Blocks()
		for r := 0; r < n; r++ {
			for i := 0; i < k; i++ {
				s := math.Abs(float64(q.Scales[r*nb+i/tc.bs]))
				if tc.asym {
					continue // range-based: bound is a full step at the ends
				}
				bound := s / 2
				if math.Abs(float64(w[r*k+i])) > float64(int(1)<<(tc.bits-1)-1)*s {
					bound = s // beyond the top positive code: clamped
				}
				if d := math.Abs(float64(dq[r*k+i] - w[r*k+i])); d > bound+1e-6 {
					t.Fatalf("bits %d: element %d,%d off by %v > half step %v", tc.bits, r, i, d, s/2)
				}
			}
		}
	}
	if _, err := QuantizeBlockwise(w, n, k, 3, 32, false); !errors.Is(err, ErrScheme) {
		t.Errorf("3 bits: %v", err)
	}
	if _, err := QuantizeBlockwise(w[:10], n, k, 4, 32, false); !errors.Is(err, ErrShape) {
		t.Errorf("short data: %v", err)
	}
}

// TestPerChannelRoundTrip: per-channel int8 codes are within half a step
// of every weight, the [K, N] layout is what DynamicQuantizeMatMul reads,
// zero rows are exact and non-finite weights are refused.
func TestPerChannelRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const n, k = 12, 40
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(r.NormFloat64()) * float32(1+i/k)
	}
	for c := range k {
		w[3*k+c] = 0
	}
	q, err := QuantizePerChannel(w, n, k)
	if err != nil {
		t.Fatal(err)
	}
	d := q.Dequantize()
	for i, v := range w {
		row := i / k
		if math.Abs(float64(d[i]-v)) > float64(q.Scales[row])/2+1e-6 {
			t.Fatalf("w[%d] = %v came back %v (scale %v)", i, v, d[i], q.Scales[row])
		}
		if got := float32(q.B[(i%k)*n+row]) * q.Scales[row]; got != d[i] {
			t.Fatalf("layout: B[%d,%d] gives %v, want %v", i%k, row, got, d[i])
		}
	}
	w[5] = float32(math.NaN())
	if _, err := QuantizePerChannel(w, n, k); !errors.Is(err, ErrShape) {
		t.Errorf("NaN weight: %v", err)
	}
}
