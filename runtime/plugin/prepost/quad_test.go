package prepost

import (
	"image"
	"math"
	"slices"
	"testing"
)

// TestMinAreaRectTilted: the pixels of a 60x10 bar turned 10 degrees give
// back its size and angle (within a pixel's rounding), where the upright
// bounds are 28 % taller than two bars' spacing.
func TestMinAreaRectTilted(t *testing.T) {
	const deg = 10.0
	a := deg * math.Pi / 180
	var pts [][2]float64
	for y := -40; y < 40; y++ {
		for x := -40; x < 40; x++ {
			// the pixel's centre in the bar's own frame
			u := (float64(x)+0.5)*math.Cos(a) + (float64(y)+0.5)*math.Sin(a)
			v := -(float64(x)+0.5)*math.Sin(a) + (float64(y)+0.5)*math.Cos(a)
			if math.Abs(u) <= 30 && math.Abs(v) <= 5 {
				pts = append(pts, [2]float64{float64(x), float64(y)}, [2]float64{float64(x + 1), float64(y + 1)},
					[2]float64{float64(x + 1), float64(y)}, [2]float64{float64(x), float64(y + 1)})
			}
		}
	}
	c, u, long, short := minAreaRect(pts)
	if math.Abs(long-60) > 2 || math.Abs(short-10) > 2 {
		t.Errorf("sides %.1f x %.1f, want 60 x 10", long, short)
	}
	if got := math.Atan2(u[1], u[0]) * 180 / math.Pi; math.Abs(got-deg) > 1.5 {
		t.Errorf("angle %.2f°, want %v°", got, deg)
	}
	if math.Hypot(c[0], c[1]) > 1 {
		t.Errorf("centre %v, want the origin", c)
	}
	q := quadOf(c, u, long, short)
	if !(q[0][0] < q[1][0] && q[0][1] < q[3][1] && q[1][1] > q[0][1]) {
		t.Errorf("corners %v not ordered top-left, top-right, bottom-right, bottom-left", q)
	}
}

// TestPreprocessQuadUpright: an axis-aligned quad samples as Preprocess
// samples the crop, inside the crop.
func TestPreprocessQuadUpright(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 40, 30))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 37)
	}
	r := image.Rect(5, 4, 37, 20)
	spec := ImageSpec{Width: 16, Height: 8, NCHW: true}
	crop, _ := Crop(img, r)
	want, _, _ := Preprocess(crop, spec)
	got := PreprocessQuad(img, Quad{{5, 4}, {37, 4}, {37, 20}, {5, 20}}, spec)
	if !slices.Equal(got, want) {
		t.Fatalf("quad sampling differs from the crop's")
	}
}

// TestDBQuadsSeparateTiltedLines: two parallel bars 6 pixels thick with
// centres 20 apart, tilted 10 degrees, are two regions whose rotated boxes
// (grown by the unclip) stay under the spacing, while their upright boxes
// overlap.
func TestDBQuadsSeparateTiltedLines(t *testing.T) {
	const w, h = 200, 120
	a := 10 * math.Pi / 180
	prob := make([]float32, w*h)
	for y := range h {
		for x := range w {
			u := (float64(x)-100)*math.Cos(a) + (float64(y)-60)*math.Sin(a)
			v := -(float64(x)-100)*math.Sin(a) + (float64(y)-60)*math.Cos(a)
			if math.Abs(u) < 80 && (math.Abs(v+10) < 3 || math.Abs(v-10) < 3) {
				prob[y*w+x] = 0.9
			}
		}
	}
	boxes := DBBoxes(prob, w, h, w, h, PaddleDB)
	if len(boxes) != 2 {
		t.Fatalf("%d regions, want 2", len(boxes))
	}
	if boxes[0].Y1 <= boxes[1].Y0 {
		t.Fatalf("upright boxes %v and %v do not overlap: the test would show nothing", boxes[0], boxes[1])
	}
	for _, b := range boxes {
		qw, qh := b.Quad.Size()
		if qw < 150 || qh >= 20 {
			t.Errorf("rotated box %v is %.0f x %.0f, want a line about 160 long and under the spacing of 20 high", b.Quad, qw, qh)
		}
	}
}
