// Package vec holds the SDK's one copy of small numeric kernels over
// float32 rows that several layers run in their hot paths: the argmax of a
// logits row (the sampler's greedy pick, a quantisation check's
// agreement), with an AVX2 path where the CPU has one and the same result
// in Go everywhere else. Pure and safe for concurrent use.
package vec

import "math"

// Argmax returns the first index of the largest value of x (ties go to
// the lower index, as torch.argmax does). NaNs are never the maximum; with
// no number above −Inf, or x empty, it returns 0.
func Argmax(x []float32) int { return argmax(x) }

// Max returns the largest value of x: NaNs are never it, and with no
// number above −Inf, or x empty, it is −Inf.
func Max(x []float32) float32 { return maxOf(x) }

// maxGeneric is Max in Go: the value at argmaxGeneric's index (its
// lanes written for speed), −Inf where that is not a number above −Inf.
func maxGeneric(x []float32) float32 {
	if len(x) == 0 {
		return float32(math.Inf(-1))
	}
	if v := x[argmaxGeneric(x)]; v == v {
		return v
	}
	return float32(math.Inf(-1))
}

// argmaxGeneric is Argmax in Go, for every CPU.
//
// It runs once per row per step over the whole vocabulary, so it is
// written for speed: the maximum first, in eight independent lanes (a
// single running maximum is one long dependency chain), then the first
// index holding it. The eight lanes are written out: the same loop over
// the lanes (for k, v := range x[i:i+8]) is slower, the compiler not
// unrolling it (BenchmarkArgmax measures a 32k row). NaNs are never the
// maximum; with no number above −Inf it returns 0.
func argmaxGeneric(x []float32) int {
	inf := float32(math.Inf(-1))
	m := [8]float32{inf, inf, inf, inf, inf, inf, inf, inf}
	i := 0
	for ; i+8 <= len(x); i += 8 {
		v := x[i : i+8 : i+8]
		if v[0] > m[0] {
			m[0] = v[0]
		}
		if v[1] > m[1] {
			m[1] = v[1]
		}
		if v[2] > m[2] {
			m[2] = v[2]
		}
		if v[3] > m[3] {
			m[3] = v[3]
		}
		if v[4] > m[4] {
			m[4] = v[4]
		}
		if v[5] > m[5] {
			m[5] = v[5]
		}
		if v[6] > m[6] {
			m[6] = v[6]
		}
		if v[7] > m[7] {
			m[7] = v[7]
		}
	}
	best := inf
	for _, v := range m {
		if v > best {
			best = v
		}
	}
	for _, v := range x[i:] {
		if v > best {
			best = v
		}
	}
	for j, v := range x {
		if v == best {
			return j
		}
	}
	return 0
}
