package resize

import (
	"image"
	"image/color"
	"math"
	"testing"
)

func TestBilinear(t *testing.T) {
	// 2×1: black | white. Upscaled to 4×1 with half-pixel centres the
	// outputs sit at source x = -0.25, 0.25, 0.75, 1.25 → 0, .25, .75, 1.
	img := image.NewRGBA(image.Rect(0, 0, 2, 1))
	img.Set(0, 0, color.RGBA{0, 0, 0, 255})
	img.Set(1, 0, color.RGBA{255, 255, 255, 255})
	got := Bilinear(img, 4, 1, HWC)
	want := []float32{0, 0.25, 0.75, 1}
	for x, w := range want {
		for c := range 3 {
			if v := got[x*3+c]; math.Abs(float64(v-w)) > 1e-6 {
				t.Fatalf("x=%d c=%d: %v, want %v (all %v)", x, c, v, w, got)
			}
		}
	}
}

func TestLayouts(t *testing.T) {
	img := image.NewRGBA(image.Rect(10, 20, 13, 22)) // a non-zero origin
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	hwc := Bilinear(img, 3, 2, HWC) // same size: the pixels themselves
	chw := Bilinear(img, 3, 2, CHW)
	for y := range 2 {
		for x := range 3 {
			p := img.RGBAAt(10+x, 20+y)
			for c, v := range []uint8{p.R, p.G, p.B} {
				want := float32(v) / 255
				if h := hwc[(y*3+x)*3+c]; math.Abs(float64(h-want)) > 1e-6 {
					t.Fatalf("HWC (%d,%d,%d) = %v, want %v", x, y, c, h, want)
				}
				if p := chw[c*6+y*3+x]; math.Abs(float64(p-want)) > 1e-6 {
					t.Fatalf("CHW (%d,%d,%d) = %v, want %v", x, y, c, p, want)
				}
			}
		}
	}
}

// A uniform image stays uniform at any size: no weights leak outside
// [0, 1] and edges clamp instead of reading black.
func TestUniformAnySize(t *testing.T) {
	img := image.NewUniform(color.RGBA{51, 102, 204, 255})
	src := image.NewRGBA(image.Rect(0, 0, 7, 5))
	for y := range 5 {
		for x := range 7 {
			src.Set(x, y, img.C)
		}
	}
	for _, s := range [][2]int{{1, 1}, {3, 2}, {16, 9}, {640, 480}} {
		out := Bilinear(src, s[0], s[1], CHW)
		for i, v := range out {
			want := []float32{0.2, 0.4, 0.8}[i/(s[0]*s[1])]
			if math.Abs(float64(v-want)) > 1e-6 {
				t.Fatalf("%v: value %d = %v, want %v", s, i, v, want)
			}
		}
	}
}
