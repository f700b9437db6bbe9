package jpegscale

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// photoPath is the real 1024x708 4:4:4 camera photo the package is for.
const photoPath = "/root/.cache/edgeinfer/models/images/locomotion-nude-male.jpg"

// unsupportedFiles are the testdata files Decode must refuse with
// ErrUnsupported (testdata/README says how each was made).
var unsupportedFiles = map[string]string{
	"progressive.jpg": "progressive",
	"arithmetic.jpg":  "arithmetic",
	"s411.jpg":        "sampling",
	"rgb.jpg":         "RGB",
}

// photoLike is a deterministic stand-in for a photo: smooth gradients, a
// few hard edges and some noise.
func photoLike(w, h int, seed uint64) *image.RGBA {
	rng := rand.New(rand.NewPCG(seed, 1))
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			fx, fy := float64(x)/float64(w), float64(y)/float64(h)
			r := 128 + 90*math.Sin(6*fx)*math.Cos(4*fy)
			g := 30 + 190*fx*fy
			b := 220 - 160*fy + 25*math.Sin(float64(x+y)/9)
			if dx, dy := fx-0.4, fy-0.5; dx*dx+dy*dy < 0.04 {
				r, g, b = 245, 235-100*fy, 30
			}
			if fx > 0.7 && fx < 0.8 && fy > 0.15 {
				r, g, b = 15, 40+80*fx, 70
			}
			n := func(v float64) uint8 {
				return uint8(min(max(v+rng.NormFloat64()*6, 0), 255))
			}
			m.SetRGBA(x, y, color.RGBA{n(r), n(g), n(b), 255})
		}
	}
	return m
}

func encodeGo(t testing.TB, m image.Image, quality int) []byte {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, m, &jpeg.Options{Quality: quality}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// plane is one component's samples as a decoder left them.
type plane struct {
	name         string
	pix          []uint8
	stride, w, h int
}

// planes splits a decoded *image.Gray or *image.YCbCr (with Rect at the
// origin) into its planes, sized as image.NewYCbCr sizes them.
func planes(t testing.TB, m image.Image) []plane {
	switch m := m.(type) {
	case *image.Gray:
		b := m.Rect
		return []plane{{"gray", m.Pix, m.Stride, b.Dx(), b.Dy()}}
	case *image.YCbCr:
		w, h := m.Rect.Dx(), m.Rect.Dy()
		var xs, ys int
		switch m.SubsampleRatio {
		case image.YCbCrSubsampleRatio444:
		case image.YCbCrSubsampleRatio422:
			xs = 1
		case image.YCbCrSubsampleRatio420:
			xs, ys = 1, 1
		case image.YCbCrSubsampleRatio440:
			ys = 1
		default:
			t.Fatalf("subsampling %v", m.SubsampleRatio)
		}
		cw, ch := (w+1<<xs-1)>>xs, (h+1<<ys-1)>>ys
		return []plane{
			{"Y", m.Y, m.YStride, w, h},
			{"Cb", m.Cb, m.CStride, cw, ch},
			{"Cr", m.Cr, m.CStride, cw, ch},
		}
	}
	t.Fatalf("decoded a %T", m)
	return nil
}

// diffStats compares a scaled decode with the box averages of a full one.
type diffStats struct {
	n, within2 int
	sumAbs     float64
	maxAbs     float64
	// maxUnclipped is the largest difference where no sample of the box
	// is 0 or 255 in the full decode, so that only rounding is left.
	maxUnclipped float64
}

func (s diffStats) mean() float64    { return s.sumAbs / float64(s.n) }
func (s diffStats) fracIn2() float64 { return float64(s.within2) / float64(s.n) }
func (s diffStats) String() string {
	return fmt.Sprintf("%d samples, mean |d| %.3f, max |d| %.2f (%.2f where nothing clips), %.2f%% within ±2", s.n, s.mean(), s.maxAbs, s.maxUnclipped, 100*s.fracIn2())
}

// compare box-averages each plane of full over scale x scale blocks,
// clipped at the plane's edge, and compares the averages with got's.
func compare(t testing.TB, full, got image.Image, scale int) diffStats {
	fp, gp := planes(t, full), planes(t, got)
	if len(fp) != len(gp) {
		t.Fatalf("%d planes, image/jpeg has %d", len(gp), len(fp))
	}
	var s diffStats
	for i := range fp {
		f, g := fp[i], gp[i]
		if g.name != f.name || g.w != (f.w+scale-1)/scale || g.h != (f.h+scale-1)/scale {
			t.Fatalf("plane %s %dx%d, want %s %dx%d", g.name, g.w, g.h, f.name, (f.w+scale-1)/scale, (f.h+scale-1)/scale)
		}
		for oy := range g.h {
			for ox := range g.w {
				sum, cnt, clipped := 0, 0, false
				for y := oy * scale; y < min((oy+1)*scale, f.h); y++ {
					for x := ox * scale; x < min((ox+1)*scale, f.w); x++ {
						v := f.pix[y*f.stride+x]
						sum += int(v)
						cnt++
						clipped = clipped || v == 0 || v == 255
					}
				}
				d := math.Abs(float64(g.pix[oy*g.stride+ox]) - float64(sum)/float64(cnt))
				s.n++
				s.sumAbs += d
				s.maxAbs = max(s.maxAbs, d)
				if !clipped {
					s.maxUnclipped = max(s.maxUnclipped, d)
				}
				if d <= 2 {
					s.within2++
				}
			}
		}
	}
	return s
}

// checkDifferential decodes data with image/jpeg and with Decode at scales
// 4 and 8, and holds the scaled decodes to the package's bounds against the
// full decode's box averages: a mean absolute difference under 0.5, 99.5%
// of the samples within ±2, and at most 1 wherever no sample of the box
// clips to 0 or 255 (there only rounding separates the two). Measured (the
// t.Log lines with -v), as mean |d| / max |d| / share within ±2 / max |d|
// where nothing clips, at scales 4 and 8:
//
//	synthetic (Go's encoder)  <= 0.26 / 0.75 / 100%   / 0.75   <= 0.27 / 0.67 / 100%   / 0.67
//	cjpeg files               <= 0.26 / 9.06 / 99.82% / 0.75   <= 0.25 / 2.33 / 99.52% / 0.62
//	the real photo               0.23 / 0.81 / 100%   / 0.81      0.25 / 0.75 / 100%   / 0.75
//
// Every cjpeg file but q5.jpg is 100% within ±2; at quality 5 the blocks
// overshoot and image/jpeg's pixels clip, where the averages here do not.
func checkDifferential(t *testing.T, name string, data []byte) {
	t.Helper()
	full, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: image/jpeg: %v", name, err)
	}
	for _, scale := range []int{4, 8} {
		got, err := Decode(context.Background(), data, scale, 1<<30)
		if err != nil {
			t.Fatalf("%s at 1/%d: %v", name, scale, err)
		}
		fb := full.Bounds()
		if want := image.Rect(0, 0, (fb.Dx()+scale-1)/scale, (fb.Dy()+scale-1)/scale); got.Bounds() != want {
			t.Fatalf("%s at 1/%d: bounds %v, want %v", name, scale, got.Bounds(), want)
		}
		if fy, ok := full.(*image.YCbCr); ok {
			gy := got.(*image.YCbCr)
			if gy.SubsampleRatio != fy.SubsampleRatio {
				t.Fatalf("%s at 1/%d: subsampling %v, want %v", name, scale, gy.SubsampleRatio, fy.SubsampleRatio)
			}
			want := image.NewYCbCr(got.Bounds(), gy.SubsampleRatio)
			if len(gy.Y) != len(want.Y) || len(gy.Cb) != len(want.Cb) || gy.YStride != want.YStride || gy.CStride != want.CStride {
				t.Fatalf("%s at 1/%d: planes differ from image.NewYCbCr's", name, scale)
			}
		}
		s := compare(t, full, got, scale)
		t.Logf("%s at 1/%d: %v", name, scale, s)
		if s.mean() >= 0.5 || s.fracIn2() < 0.995 || s.maxUnclipped > 1 {
			t.Errorf("%s at 1/%d: %v; want mean < 0.5, 99.5%% within ±2 and at most 1 where nothing clips", name, scale, s)
		}
	}
}

func TestDifferentialGoEncoder(t *testing.T) {
	for _, size := range [][2]int{{37, 29}, {200, 150}, {257, 131}} {
		src := photoLike(size[0], size[1], uint64(size[0]))
		gray := image.NewGray(src.Rect)
		for y := range size[1] {
			for x := range size[0] {
				gray.Set(x, y, src.At(x, y))
			}
		}
		for _, q := range []int{50, 95} {
			checkDifferential(t, fmt.Sprintf("go %dx%d color q%d", size[0], size[1], q), encodeGo(t, src, q))
			checkDifferential(t, fmt.Sprintf("go %dx%d gray q%d", size[0], size[1], q), encodeGo(t, gray, q))
		}
	}
}

func TestDifferentialCjpeg(t *testing.T) {
	files, err := filepath.Glob("testdata/*.jpg")
	if err != nil || len(files) == 0 {
		t.Fatal("no testdata", err)
	}
	for _, f := range files {
		if _, ok := unsupportedFiles[filepath.Base(f)]; ok {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkDifferential(t, filepath.Base(f), data)
	}
}

func TestDifferentialPhoto(t *testing.T) {
	data, err := os.ReadFile(photoPath)
	if err != nil {
		t.Skip(err)
	}
	checkDifferential(t, filepath.Base(photoPath), data)
}

func TestUnsupported(t *testing.T) {
	for name, what := range unsupportedFiles {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Decode(context.Background(), data, 8, 1<<30)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), what) {
			t.Errorf("%s: %v, want ErrUnsupported naming %q", name, err, what)
		}
	}
	// Frame headers patched: 12-bit precision, a height left to a DNL
	// marker, a luma sampling factor of 3.
	data := readTestdata(t, "s420.jpg")
	sof := bytes.Index(data, []byte{0xFF, mSOF0})
	for _, c := range []struct {
		patch map[int]byte // offset from the marker: value
		what  string
	}{
		{map[int]byte{4: 12}, "12-bit"},
		{map[int]byte{5: 0, 6: 0}, "DNL"},
		{map[int]byte{11: 0x32}, "sampling"},
	} {
		bad := bytes.Clone(data)
		for at, v := range c.patch {
			bad[sof+at] = v
		}
		if _, err := Decode(context.Background(), bad, 8, 1<<30); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.what) {
			t.Errorf("SOF patched %v: %v, want ErrUnsupported naming %q", c.patch, err, c.what)
		}
	}
}

// TestQuarters checks the scale-4 transform (rowSlot, rowFix, quarters)
// against a floating-point inverse DCT averaged over each 4x4 quarter, with
// random values in all 64 coefficients: the even rows and columns that the
// transform never sees must not change the averages.
func TestQuarters(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for range 2000 {
		var coef [64]float64 // row-major
		var rows [16]int64
		for k, nat := range zigzag {
			v := int32(rng.IntN(801) - 400)
			if k == 0 {
				v = int32(rng.IntN(2001) - 1000)
			}
			coef[nat] = float64(v)
			rows[rowSlot[k]] += int64(v) * rowFix[k]
		}
		var sums [4]float64
		for y := range 8 {
			for x := range 8 {
				s := idctAt(func(i int) float64 { return coef[i] }, x, y)
				sums[y/4*2+x/4] += s + 128
			}
		}
		got := quarters(&rows)
		for q := range 4 {
			want := sums[q] / 16
			if math.Abs(want-math.Round(want)) > 0.49 {
				continue // too near a rounding boundary to say
			}
			if w := uint8(min(max(math.Floor(want+0.5), 0), 255)); got[q] != w {
				t.Fatalf("quarter %d: %d, want %d (%.4f)", q, got[q], w, want)
			}
		}
	}
}

// TestAverageBox checks the edge blocks' weights the same way, for every
// box an edge block can have.
func TestAverageBox(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for range 300 {
		var blk [64]int32
		for i := range blk {
			blk[i] = int32(rng.IntN(801) - 400)
		}
		var pix [8][8]float64
		for y := range 8 {
			for x := range 8 {
				s := idctAt(func(i int) float64 { return float64(blk[i]) }, x, y)
				pix[y][x] = s + 128
			}
		}
		for _, x0 := range []int{0, 4} {
			for x1 := x0 + 1; x1 <= 8; x1++ {
				for _, y0 := range []int{0, 4} {
					for y1 := y0 + 1; y1 <= 8; y1++ {
						sum := 0.0
						for y := y0; y < y1; y++ {
							for x := x0; x < x1; x++ {
								sum += pix[y][x]
							}
						}
						want := sum / float64((y1-y0)*(x1-x0))
						if math.Abs(want-math.Round(want)) > 0.49 {
							continue
						}
						if got, w := averageBox(&blk, x0, x1, y0, y1), uint8(min(max(math.Floor(want+0.5), 0), 255)); got != w {
							t.Fatalf("box x %d-%d y %d-%d: %d, want %d (%.4f)", x0, x1, y0, y1, got, w, want)
						}
					}
				}
			}
		}
	}
}

func readTestdata(t testing.TB, name string) []byte {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestTruncated decodes every prefix of small files: each gives an error
// or an image of the right size, and never a panic.
func TestTruncated(t *testing.T) {
	for _, name := range []string{"s420.jpg", "restart-mcus.jpg", "gray.jpg", "twoscans.jpg"} {
		data := readTestdata(t, name)
		images := 0
		for n := range len(data) {
			for _, scale := range []int{4, 8} {
				m, err := Decode(context.Background(), data[:n], scale, 1<<22)
				if err == nil {
					images++
					if want := image.Rect(0, 0, (157+scale-1)/scale, (109+scale-1)/scale); m.Bounds() != want {
						t.Fatalf("%s[:%d] at 1/%d: bounds %v, want %v", name, n, scale, m.Bounds(), want)
					}
				} else if !errors.Is(err, ErrFormat) {
					t.Fatalf("%s[:%d] at 1/%d: %v, want ErrFormat", name, n, scale, err)
				}
			}
		}
		t.Logf("%s: %d of %d prefixes decode", name, images/2, len(data))
	}
}

func TestErrors(t *testing.T) {
	data := readTestdata(t, "s420.jpg")
	ctx := context.Background()
	if _, err := Decode(ctx, data, 3, 1<<30); err == nil {
		t.Error("scale 3 decoded")
	}
	_, err := Decode(ctx, data, 8, 157*109-1)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "17113") || !strings.Contains(err.Error(), "17112") {
		t.Errorf("over the limit: %v, want ErrTooLarge naming 17113 and 17112", err)
	}
	if _, err := Decode(ctx, data, 8, 157*109); err != nil {
		t.Errorf("at the limit: %v", err)
	}

	cause := errors.New("deadline of the request")
	cctx, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	if _, err := Decode(cctx, data, 4, 1<<30); err != cause {
		t.Errorf("cancelled: %v, want the cause", err)
	}
	// A context that is done after the first MCU row.
	lctx := &laterCtx{Context: ctx, ok: 2}
	if _, err := Decode(lctx, data, 4, 1<<30); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled during the scan: %v", err)
	}

	// The first DHT claims two codes of length 1, which leaves no room
	// for the rest: the canonical code overflows.
	bad := bytes.Clone(data)
	i := bytes.Index(bad, []byte{0xFF, mDHT})
	counts := bad[i+5 : i+21]
	counts[0] += 2
	for k, taken := 15, 0; taken < 2; k-- { // keep the number of symbols
		for counts[k] > 0 && taken < 2 {
			counts[k]--
			taken++
		}
	}
	if _, err := Decode(ctx, bad, 8, 1<<30); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "Huffman") {
		t.Errorf("bogus Huffman table: %v, want ErrFormat", err)
	}

	// A scan that names a Huffman table never defined.
	bad = bytes.Clone(data)
	i = bytes.Index(bad, []byte{0xFF, mSOS})
	bad[i+6] = 0x33
	if _, err := Decode(ctx, bad, 8, 1<<30); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "undefined") {
		t.Errorf("undefined table: %v, want ErrFormat", err)
	}

	for _, b := range [][]byte{nil, {0xFF}, {0xFF, 0xD8}, {0xFF, 0xD8, 0xFF, 0xD9}, []byte("not a jpeg")} {
		if _, err := Decode(ctx, b, 8, 1<<30); !errors.Is(err, ErrFormat) {
			t.Errorf("%q: %v, want ErrFormat", b, err)
		}
	}
}

// laterCtx is a context whose Err turns non-nil after ok calls.
type laterCtx struct {
	context.Context
	ok int
}

func (c *laterCtx) Err() error {
	if c.ok > 0 {
		c.ok--
		return nil
	}
	return context.Canceled
}

// idctAt is the floating-point inverse DCT of an 8x8 block of dequantised
// coefficients (natural order, coef(v*8+u)) at pixel (x, y), without the
// level shift (ITU T.81 A.3.3).
func idctAt(coef func(int) float64, x, y int) float64 {
	s := 0.0
	for v := range 8 {
		for u := range 8 {
			cu, cv := 1.0, 1.0
			if u == 0 {
				cu = 1 / math.Sqrt2
			}
			if v == 0 {
				cv = 1 / math.Sqrt2
			}
			s += cu * cv / 4 * coef(v*8+u) * math.Cos(float64(2*x+1)*float64(u)*math.Pi/16) * math.Cos(float64(2*y+1)*float64(v)*math.Pi/16)
		}
	}
	return s
}
