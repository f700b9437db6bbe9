package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/gomono"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// Label is one generated label: its lines of text and the image.
type Label struct {
	Name  string
	Lines []string
	Image image.Image
}

// fonts are the Go fonts (BSD-licensed, bundled in golang.org/x/image) the
// labels are printed in: a proportional, a bold and a monospaced face, as
// label printers use.
var fonts = [][]byte{goregular.TTF, gobold.TTF, gomono.TTF}

// GenerateLabels draws n labels with known text (a product line, a lot
// number, a production and an expiry date), seeded so that the same seed
// gives the same labels. Each is printed in one of the Go fonts, dark ink
// on a pale label on a grey belt, rotated by up to maxDeg degrees and
// blurred by a 3x3 box filter (blur passes), as a line camera sees it.
//
// When photo is not nil, every second label lies on a region of it instead
// of the grey belt (the public-domain photos of platforms/models/fetch.sh),
// so the detector must ignore what else is in the picture.
func GenerateLabels(n int, seed uint64, maxDeg float64, blur int, photo image.Image) ([]Label, error) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	products := []string{"GEAR OIL 5L", "BOLT M8x40", "VALVE DN25", "SEAL KIT 12", "PUMP P-300", "FILTER F9"}
	out := make([]Label, n)
	for i := range out {
		lines := []string{
			products[r.IntN(len(products))],
			fmt.Sprintf("LOT %c%c%d-%04d", 'A'+r.IntN(26), 'A'+r.IntN(26), r.IntN(10), r.IntN(10000)),
			fmt.Sprintf("MFG %d-%02d-%02d", 2025+r.IntN(2), 1+r.IntN(12), 1+r.IntN(28)),
			fmt.Sprintf("EXP %d-%02d-%02d", 2027+r.IntN(3), 1+r.IntN(12), 1+r.IntN(28)),
		}
		var bg image.Image = image.NewUniform(color.RGBA{110, 110, 115, 255})
		if photo != nil && i%2 == 1 {
			b := photo.Bounds()
			at := image.Pt(b.Min.X+r.IntN(max(1, b.Dx()/2)), b.Min.Y+r.IntN(max(1, b.Dy()/2)))
			bg = offset{photo, at}
		}
		img, err := drawLabel(lines, fonts[i%len(fonts)], (r.Float64()*2-1)*maxDeg, blur, bg)
		if err != nil {
			return nil, err
		}
		out[i] = Label{Name: fmt.Sprintf("label-%03d", i), Lines: lines, Image: img}
	}
	return out, nil
}

// offset reads img shifted so that at is the origin, wrapping around.
type offset struct {
	img image.Image
	at  image.Point
}

func (o offset) at2(x, y int) color.Color {
	b := o.img.Bounds()
	return o.img.At(b.Min.X+(o.at.X-b.Min.X+x)%b.Dx(), b.Min.Y+(o.at.Y-b.Min.Y+y)%b.Dy())
}

func (o offset) ColorModel() color.Model { return o.img.ColorModel() }
func (o offset) Bounds() image.Rectangle { return image.Rect(-1<<20, -1<<20, 1<<20, 1<<20) }
func (o offset) At(x, y int) color.Color { return o.at2(max(x, 0), max(y, 0)) }

func drawLabel(lines []string, ttf []byte, deg float64, blur int, bg image.Image) (image.Image, error) {
	f, err := opentype.Parse(ttf)
	if err != nil {
		return nil, err
	}
	face, err := opentype.NewFace(f, &opentype.FaceOptions{Size: 26, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		return nil, err
	}
	defer face.Close()
	const lineH, pad = 40, 24
	w := 0
	for _, l := range lines {
		w = max(w, font.MeasureString(face, l).Ceil())
	}
	label := image.NewRGBA(image.Rect(0, 0, w+2*pad, len(lines)*lineH+2*pad))
	draw.Draw(label, label.Bounds(), image.NewUniform(color.RGBA{245, 240, 225, 255}), image.Point{}, draw.Src)
	d := &font.Drawer{Dst: label, Src: image.NewUniform(color.RGBA{25, 25, 35, 255}), Face: face}
	for i, l := range lines {
		d.Dot = fixed.P(pad, pad+i*lineH+30)
		d.DrawString(l)
	}
	return blurBox(rotate(label, deg, bg), blur), nil
}

// rotate turns src by deg degrees about its centre onto a background
// background bg with a margin wide enough to hold it (bilinear sampling).
func rotate(src *image.RGBA, deg float64, bg image.Image) *image.RGBA {
	const margin = 40
	sb := src.Bounds()
	dst := image.NewRGBA(image.Rect(0, 0, sb.Dx()+2*margin, sb.Dy()+2*margin))
	sin, cos := math.Sincos(deg * math.Pi / 180)
	cx, cy := float64(dst.Bounds().Dx())/2, float64(dst.Bounds().Dy())/2
	scx, scy := float64(sb.Dx())/2, float64(sb.Dy())/2
	for y := range dst.Bounds().Dy() {
		for x := range dst.Bounds().Dx() {
			dx, dy := float64(x)+0.5-cx, float64(y)+0.5-cy
			sx, sy := cos*dx+sin*dy+scx-0.5, -sin*dx+cos*dy+scy-0.5
			br, bgc, bb, _ := bg.At(x, y).RGBA()
			dst.SetRGBA(x, y, bilinear(src, sx, sy, color.RGBA{uint8(br >> 8), uint8(bgc >> 8), uint8(bb >> 8), 255}))
		}
	}
	return dst
}

func bilinear(src *image.RGBA, x, y float64, bg color.RGBA) color.RGBA {
	x0, y0 := int(math.Floor(x)), int(math.Floor(y))
	fx, fy := x-float64(x0), y-float64(y0)
	at := func(x, y int) [3]float64 {
		if !(image.Point{x, y}.In(src.Bounds())) {
			return [3]float64{float64(bg.R), float64(bg.G), float64(bg.B)}
		}
		c := src.RGBAAt(x, y)
		return [3]float64{float64(c.R), float64(c.G), float64(c.B)}
	}
	a, b, c, d := at(x0, y0), at(x0+1, y0), at(x0, y0+1), at(x0+1, y0+1)
	var o [3]uint8
	for i := range 3 {
		v := (a[i]*(1-fx)+b[i]*fx)*(1-fy) + (c[i]*(1-fx)+d[i]*fx)*fy
		o[i] = uint8(min(max(math.Round(v), 0), 255))
	}
	return color.RGBA{o[0], o[1], o[2], 255}
}

// blurBox applies a 3x3 box filter n times.
func blurBox(img *image.RGBA, n int) *image.RGBA {
	b := img.Bounds()
	for range n {
		out := image.NewRGBA(b)
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				var s [3]int
				k := 0
				for dy := -1; dy <= 1; dy++ {
					for dx := -1; dx <= 1; dx++ {
						if p := (image.Point{x + dx, y + dy}); p.In(b) {
							c := img.RGBAAt(p.X, p.Y)
							s[0], s[1], s[2] = s[0]+int(c.R), s[1]+int(c.G), s[2]+int(c.B)
							k++
						}
					}
				}
				out.SetRGBA(x, y, color.RGBA{uint8(s[0] / k), uint8(s[1] / k), uint8(s[2] / k), 255})
			}
		}
		img = out
	}
	return img
}

// WriteLabels writes each label as NAME.png with its expected text, one
// line per line, in NAME.txt (the ground truth --images reads).
func WriteLabels(dir string, labels []Label) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, l := range labels {
		f, err := os.Create(filepath.Join(dir, l.Name+".png"))
		if err != nil {
			return err
		}
		err = png.Encode(f, l.Image)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, l.Name+".txt"), []byte(strings.Join(l.Lines, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
