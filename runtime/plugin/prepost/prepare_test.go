package prepost

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// photo is a deterministic photo-like image: smooth colour gradients, a
// few hard edges and some noise, so that both the low and the high
// frequencies of a JPEG carry something.
func photo(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	seed := uint32(7)
	for y := range h {
		for x := range w {
			seed = seed*1664525 + 1013904223
			n := int(seed>>27) - 16
			r := 128 + 100*math.Sin(float64(x)/97) + float64(n)
			g := 128 + 90*math.Cos(float64(y)/61) + float64(n)
			b := float64((x/64+y/48)%2) * 200
			if (x-w/2)*(x-w/2)+(y-h/3)*(y-h/3) < (h/5)*(h/5) {
				r, g = 240, 30
			}
			img.Set(x, y, color.RGBA{clamp8(r), clamp8(g), clamp8(b), 255})
		}
	}
	return img
}

func clamp8(v float64) uint8 { return uint8(min(max(v, 0), 255)) }

func encodeJPEG(t testing.TB, img image.Image) []byte {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// boxed is img averaged over s x s blocks in RGB (the reference for a
// reduced decode, which averages in YCbCr before its one conversion).
func boxed(img image.Image, s int) image.Image {
	b := img.Bounds()
	w, h := (b.Dx()+s-1)/s, (b.Dy()+s-1)/s
	out := image.NewRGBA64(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			var sum [3]float64
			n := 0.0
			for dy := range s {
				for dx := range s {
					px, py := x*s+dx, y*s+dy
					if px >= b.Dx() || py >= b.Dy() {
						continue
					}
					r, g, bl, _ := img.At(b.Min.X+px, b.Min.Y+py).RGBA()
					sum[0], sum[1], sum[2] = sum[0]+float64(r), sum[1]+float64(g), sum[2]+float64(bl)
					n++
				}
			}
			out.SetRGBA64(x, y, color.RGBA64{uint16(sum[0]/n + 0.5), uint16(sum[1]/n + 0.5), uint16(sum[2]/n + 0.5), 0xffff})
		}
	}
	return out
}

// diffs is the mean and largest absolute difference of two inputs.
func diffs(a, b []float32) (mean, worst float64) {
	for i := range a {
		d := math.Abs(float64(a[i] - b[i]))
		mean += d
		worst = max(worst, d)
	}
	return mean / float64(len(a)), worst
}

// TestPrepareImageReduces: a JPEG eight times BlazeFace's input is decoded
// at 1/8 and equals the box-averaged full decode, resized, within the
// rounding of its 8-bit samples and the coarser chroma of 4:2:0 (whose
// chroma block spans 16x16 pixels); a crop four times the input at 1/4;
// an input the image is not four times as large as, a PNG and a
// progressive JPEG take the full decode and equal Preprocess exactly.
func TestPrepareImageReduces(t *testing.T) {
	ctx := context.Background()
	src := photo(1024, 708)
	jpg := encodeJPEG(t, src)
	big := photo(1100, 1050)
	gray := image.NewGray(big.Bounds())
	for y := range big.Bounds().Dy() {
		for x := range big.Bounds().Dx() {
			gray.Set(x, y, big.At(x, y))
		}
	}
	for _, tc := range []struct {
		name    string
		src     image.Image
		crop    image.Rectangle
		spec    ImageSpec
		reduced int
	}{
		{"1024x708 whole, 1/4", src, image.Rectangle{}, BlazeFace, 4},
		{"1024x708 crop, 1/4", src, image.Rect(96, 40, 96+600, 40+520), BlazeFace, 4},
		{"1100x1050, 1/8", big, image.Rectangle{}, BlazeFace, 8},
		{"1100x1050 gray, 1/8", gray, image.Rectangle{}, BlazeFace, 8},
		{"1100x1050 gray crop, 1/4", gray, image.Rect(5, 9, 5+530, 9+600), BlazeFace, 4},
		{"paddle-det (960 a side), full", src, image.Rectangle{}, PaddleDet, 1},
		{"small crop, full", src, image.Rect(15, 535, 85, 605), BlazeFace, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := jpg
			if tc.src != src {
				b = encodeJPEG(t, tc.src)
			}
			full, err := DecodeImage(b)
			if err != nil {
				t.Fatal(err)
			}
			p, err := PrepareImage(ctx, b, 1<<30, 0, tc.crop, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if p.Reduced != tc.reduced {
				t.Fatalf("reduced by %d, want %d", p.Reduced, tc.reduced)
			}
			ref := full
			if tc.crop != (image.Rectangle{}) {
				ref, _ = Crop(full, tc.crop)
			}
			if p.Source != ref.Bounds().Size() {
				t.Errorf("source %v, want %v", p.Source, ref.Bounds().Size())
			}
			if tc.reduced == 1 {
				want, w, h := Preprocess(ref, tc.spec)
				if !slices.Equal(p.Data, want) || p.Width != w || p.Height != h {
					t.Errorf("the full decode's input differs from Preprocess's (%dx%d, want %dx%d)", p.Width, p.Height, w, h)
				}
				return
			}
			// The reference: the full decode box-averaged on the grid of
			// the whole image (a crop need not fall on it), sampled at the
			// crop's positions.
			f, r := float64(tc.reduced), ref.Bounds()
			want := resampleFrom(boxed(full, tc.reduced), tc.spec, p.Width, p.Height, float64(r.Min.X)/f, float64(r.Min.Y)/f, float64(r.Dx())/f, float64(r.Dy())/f)
			mean, worst := diffs(p.Data, want)
			t.Logf("against the box-averaged full decode: mean %.4f, largest %.4f (of a [-1,1] range)", mean, worst)
			// Gray has no chroma: only the rounding of the 8-bit samples
			// and the clipping of the full decode's pixels (2/255 = 0.008
			// of the range) and, for the unaligned crop, its edges. Colour
			// (4:2:0) has chroma at half the reduced resolution, which is
			// far off at a hard colour edge but not on average.
			meanMax, worstMax := 0.004, 0.03
			if _, ok := tc.src.(*image.RGBA); ok {
				meanMax, worstMax = 0.015, 1.0
			}
			if mean > meanMax || worst > worstMax {
				t.Errorf("mean difference %.4f (at most %g), largest %.4f (at most %g)", mean, meanMax, worst, worstMax)
			}
		})
	}

	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, src); err != nil {
		t.Fatal(err)
	}
	p, err := PrepareImage(ctx, pngBuf.Bytes(), 1<<30, 0, image.Rectangle{}, BlazeFace)
	if err != nil {
		t.Fatal(err)
	}
	if want, _, _ := Preprocess(src, BlazeFace); p.Reduced != 1 || !slices.Equal(p.Data, want) {
		t.Errorf("PNG: reduced %d, or its input differs from Preprocess's", p.Reduced)
	}

	prog, err := os.ReadFile(filepath.Join("internal", "jpegscale", "testdata", "progressive.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	pimg, err := DecodeImage(prog)
	if err != nil {
		t.Fatal(err)
	}
	small := ImageSpec{Width: pimg.Bounds().Dx() / 8, Height: pimg.Bounds().Dy() / 8}
	p, err = PrepareImage(ctx, prog, 1<<30, 0, image.Rectangle{}, small)
	if err != nil {
		t.Fatal(err)
	}
	if want, _, _ := Preprocess(pimg, small); p.Reduced != 1 || !slices.Equal(p.Data, want) {
		t.Errorf("progressive JPEG: reduced %d, or its input differs from Preprocess's", p.Reduced)
	}
}

// TestPrepareImageRefuses: the pixel and output limits from the header, a cancelled
// context, a crop outside the image and bytes that are no image.
func TestPrepareImageRefuses(t *testing.T) {
	jpg := encodeJPEG(t, photo(256, 256))
	if _, err := PrepareImage(context.Background(), jpg, 256*256-1, 0, image.Rectangle{}, BlazeFace); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the pixel limit: %v", err)
	}
	if _, err := PrepareImage(context.Background(), jpg, 1<<30, 12*128*128-1, image.Rectangle{}, BlazeFace); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "128x128") {
		t.Errorf("an input over the output limit: %v", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stopped")
	cancel(stop)
	for _, spec := range []ImageSpec{{Width: 32, Height: 32}, {Width: 200, Height: 200}} { // reduced, full
		if _, err := PrepareImage(ctx, jpg, 1<<30, 0, image.Rectangle{}, spec); !errors.Is(err, stop) {
			t.Errorf("cancelled, %dx%d: %v", spec.Width, spec.Height, err)
		}
	}
	if _, err := PrepareImage(context.Background(), jpg, 1<<30, 0, image.Rect(300, 300, 400, 400), BlazeFace); err == nil {
		t.Error("a crop outside the image was accepted")
	}
	if _, err := PrepareImage(context.Background(), []byte("not an image"), 1<<30, 0, image.Rectangle{}, BlazeFace); err == nil {
		t.Error("bytes that are no image were accepted")
	}
}

// BenchmarkPrepareImage: the camera photo (1024x708, baseline 4:4:4) made
// into BlazeFace's input by the full decode and Preprocess, and by
// PrepareImage (its 1/4 decode: the photo is 708 high), alternated round
// by round.
func BenchmarkPrepareImage(b *testing.B) {
	base, _ := os.UserCacheDir()
	jpg, err := os.ReadFile(filepath.Join(base, "edgeinfer", "models", "images", "locomotion-nude-male.jpg"))
	if err != nil {
		b.Skipf("no photo (make setup): %v", err)
	}
	full := func() {
		img, err := DecodeImage(jpg)
		if err != nil {
			b.Fatal(err)
		}
		Preprocess(img, BlazeFace)
	}
	reduced := func() {
		if _, err := PrepareImage(context.Background(), jpg, 1<<30, 0, image.Rectangle{}, BlazeFace); err != nil {
			b.Fatal(err)
		}
	}
	var tf, tr []float64
	round := 0
	for b.Loop() {
		fs := []func(){full, reduced}
		if round%2 == 1 {
			fs = []func(){reduced, full}
		}
		var d [2]float64
		for i, f := range fs {
			start := nanotime()
			f()
			d[i] = nanotime() - start
		}
		if round%2 == 1 {
			d[0], d[1] = d[1], d[0]
		}
		tf, tr = append(tf, d[0]), append(tr, d[1])
		round++
	}
	slices.Sort(tf)
	slices.Sort(tr)
	b.ReportMetric(tf[len(tf)/2]/1e6, "full-ms")
	b.ReportMetric(tr[len(tr)/2]/1e6, "reduced-ms")
	b.ReportMetric(tf[len(tf)/2]/tr[len(tr)/2], "full/reduced")
	b.ReportMetric(0, "ns/op")
}

func nanotime() float64 { return float64(time.Now().UnixNano()) }
