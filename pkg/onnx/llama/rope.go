package llama

import "math"

// ropeCache returns the cos and sin tables [positions, headDim/2] that
// com.microsoft.RotaryEmbedding reads. They are computed in float32 step by
// step as the Hugging Face implementation does, so positions far into the
// context round the same way as the reference.
func ropeCache(c *Config, positions int) (cos, sin []float32) {
	half := c.HeadDim / 2
	inv := make([]float32, half)
	for i := range inv {
		exp := float32(2*i) / float32(c.HeadDim)
		inv[i] = 1 / float32(math.Pow(c.RopeTheta, float64(exp)))
	}
	if r := c.RopeScaling; r != nil {
		switch r.Kind() {
		case "linear":
			for i := range inv {
				inv[i] /= float32(r.Factor)
			}
		case "llama3":
			llama3Scale(inv, r)
		}
	}
	cos = make([]float32, positions*half)
	sin = make([]float32, positions*half)
	for p := range positions {
		for i, f := range inv {
			a := float32(p) * f
			cos[p*half+i] = float32(math.Cos(float64(a)))
			sin[p*half+i] = float32(math.Sin(float64(a)))
		}
	}
	return cos, sin
}

// llama3Scale applies Llama 3.1's frequency-dependent scaling: long
// wavelengths are divided by the factor, short ones kept, and the band in
// between interpolated.
func llama3Scale(inv []float32, r *RopeScaling) {
	old := float64(r.OriginalMaxPositionEmbeddings)
	lowWave := old / r.LowFreqFactor
	highWave := old / r.HighFreqFactor
	for i, f := range inv {
		wave := 2 * math.Pi / float64(f)
		switch {
		case wave < highWave:
		case wave > lowWave:
			inv[i] = f / float32(r.Factor)
		default:
			smooth := (old/wave - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
			inv[i] = float32((1-smooth)*float64(f)/r.Factor + smooth*float64(f))
		}
	}
}
