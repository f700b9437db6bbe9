package quant

import (
	"errors"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/npy"
	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

func TestCalibratorRanges(t *testing.T) {
	// 100 000 values in [-1, 2] and one outlier at 50: minmax keeps it,
	// percentile 99.99 clips it.
	data := make([]float32, 100_000)
	for i := range data {
		data[i] = -1 + 3*float32(i)/float32(len(data)-1)
	}
	data[500] = 50
	for _, tc := range []struct {
		method         string
		pct            float64
		wantLo, wantHi float32
		tol            float32
	}{
		{MethodMinMax, 0, -1, 50, 0},
		{MethodPercentile, 99.99, -1, 2, 0.05},
		{MethodPercentile, 99, -0.97, 1.97, 0.05},
	} {
		t.Run(tc.method, func(t *testing.T) {
			c, err := NewCalibrator(tc.method, tc.pct)
			if err != nil {
				t.Fatal(err)
			}
			// Two observations, the second wider: the histogram must grow.
			c.Observe("a", data[:1000])
			c.Observe("a", data[1000:])
			r := c.Ranges()["a"]
			if d := max(abs32(r.Min-tc.wantLo), abs32(r.Max-tc.wantHi)); d > tc.tol+1e-6 {
				t.Fatalf("range %+v, want [%g, %g] ± %g", r, tc.wantLo, tc.wantHi, tc.tol)
			}
		})
	}
	for _, bad := range []struct {
		m string
		p float64
	}{{"kl", 0}, {MethodPercentile, 40}, {MethodPercentile, 101}} {
		if _, err := NewCalibrator(bad.m, bad.p); !errors.Is(err, ErrCalibration) {
			t.Errorf("NewCalibrator(%q, %g) = %v, want ErrCalibration", bad.m, bad.p, err)
		}
	}
}

func TestActivationParams(t *testing.T) {
	for _, tc := range []struct {
		r     Range
		scale float32
		zp    uint8
	}{
		{Range{0, 2.55}, 0.01, 0},
		{Range{-1.275, 1.275}, 0.01, 128},
		{Range{1, 2.55}, 0.01, 0}, // widened to contain 0
		{Range{-2.55, -1}, 0.01, 255},
		{Range{0, 0}, 1, 0},
	} {
		p := activationParams(tc.r)
		if math.Abs(float64(p.scale-tc.scale)) > 1e-6 || p.zp != tc.zp {
			t.Errorf("activationParams(%+v) = %+v, want scale %g zp %d", tc.r, p, tc.scale, tc.zp)
		}
	}
}

func TestPerChannelAxes(t *testing.T) {
	// [2, 3, 2] with axis 1: channel c's values are w[i] where (i/2)%3 == c.
	w := []float32{1, -1, 2, 2, 4, 4, -2, 2, 8, 0, 0, 16}
	pc := quantizePerChannel(w, []int64{2, 3, 2}, 1, 127)
	want := []float32{2.0 / 127, 8.0 / 127, 16.0 / 127}
	for c := range want {
		if math.Abs(float64(pc.scales[c]-want[c])) > 1e-7 {
			t.Fatalf("scales %v, want %v", pc.scales, want)
		}
	}
	if rel := RelativeRMS(w, pc.dequantize([]int64{2, 3, 2}, 1)); rel > 0.01 {
		t.Fatalf("rel rms %g", rel)
	}
}

func TestLoadSamples(t *testing.T) {
	dir := t.TempDir()
	img := image.NewRGBA(image.Rect(0, 0, 200, 100))
	for i := range img.Pix {
		img.Pix[i] = uint8(i)
	}
	img.Set(0, 0, color.RGBA{255, 0, 0, 255})
	f, err := os.Create(filepath.Join(dir, "a.png"))
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "b.npy"), npy.EncodeFloat32([]int64{1, 3, 32, 32}, make([]float32, 3*32*32)), 0o644); err != nil {
		t.Fatal(err)
	}
	nchw := InputSpec{Name: "x", DType: onnx.TensorProto_FLOAT, Shape: []int64{-1, 3, -1, -1}}
	s, err := LoadSamples(dir, nchw, ImageOptions{Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || shapeString(s[0].Inputs["x"].Shape) != "[1,3,32,64]" || shapeString(s[1].Inputs["x"].Shape) != "[1,3,32,32]" {
		t.Fatalf("samples %v", SampleShapes(s, "x"))
	}
	nhwc := InputSpec{Name: "in", DType: onnx.TensorProto_FLOAT, Shape: []int64{1, 48, 48, 3}}
	if err := os.Remove(filepath.Join(dir, "b.npy")); err != nil {
		t.Fatal(err)
	}
	if s, err = LoadSamples(dir, nhwc, ImageOptions{}); err != nil || shapeString(s[0].Inputs["in"].Shape) != "[1,48,48,3]" {
		t.Fatalf("nhwc: %v %v", err, s)
	}
}

// TestLoadSamplesWrongShape is the bad-input case: a calibration set that
// does not fit the input is refused, naming the input, the expected and the
// given shape.
func TestLoadSamplesWrongShape(t *testing.T) {
	in := InputSpec{Name: "x", DType: onnx.TensorProto_FLOAT, Shape: []int64{-1, 3, -1, -1}}
	for _, tc := range []struct {
		name  string
		shape []int64
		want  []string
	}{
		{"channels", []int64{1, 4, 8, 8}, []string{`"x"`, "[?,3,?,?]", "[1,4,8,8]"}},
		{"rank", []int64{3, 8, 8}, []string{`"x"`, "rank 4", "rank 3", "[3,8,8]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "s.npy"), npy.EncodeFloat32(tc.shape, make([]float32, numel(tc.shape))), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadSamples(dir, in, ImageOptions{})
			if !errors.Is(err, ErrCalibration) {
				t.Fatalf("err %v, want ErrCalibration", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not mention %s", err, w)
				}
			}
		})
	}
	gray := InputSpec{Name: "g", DType: onnx.TensorProto_FLOAT, Shape: []int64{1, 1, 32, 32}}
	dir := t.TempDir()
	f, _ := os.Create(filepath.Join(dir, "a.png"))
	_ = png.Encode(f, image.NewRGBA(image.Rect(0, 0, 4, 4)))
	f.Close()
	if _, err := LoadSamples(dir, gray, ImageOptions{}); !errors.Is(err, ErrCalibration) || !strings.Contains(err.Error(), "1 channels") {
		t.Fatalf("gray model, RGB image: %v", err)
	}
	if _, err := LoadSamples(t.TempDir(), in, ImageOptions{}); !errors.Is(err, ErrCalibration) {
		t.Fatalf("empty dir: %v", err)
	}
}

func TestBoxes(t *testing.T) {
	const h, w = 8, 10
	m := make([]float32, h*w)
	set := func(b Box, v float32) {
		for y := b.Y0; y < b.Y1; y++ {
			for x := b.X0; x < b.X1; x++ {
				m[y*w+x] = v
			}
		}
	}
	set(Box{1, 1, 4, 3}, 0.9)
	set(Box{6, 4, 9, 8}, 0.5)
	set(Box{0, 7, 1, 8}, 0.9) // one pixel: below minArea
	ref := MapBoxes(m, h, w, 0.3, 2)
	if len(ref) != 2 || ref[0] != (Box{1, 1, 4, 3}) || ref[1] != (Box{6, 4, 9, 8}) {
		t.Fatalf("boxes %v", ref)
	}
	got := []Box{{1, 1, 4, 4}, {0, 0, 1, 1}}
	if n := MatchBoxes(ref, got, 0.5); n != 1 {
		t.Fatalf("matched %d, want 1", n)
	}
	if c := Cosine([]float32{1, 2}, []float32{2, 4}); math.Abs(c-1) > 1e-12 {
		t.Fatalf("cosine %g", c)
	}
}
