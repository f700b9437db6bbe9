package prepost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // the decoders plugins accept
	_ "image/png"
	"io"
	"math"
)

// ImageSpec says how an image becomes a model input.
type ImageSpec struct {
	// Width, Height is the output size; when 0, LimitSide decides it.
	Width, Height int
	// LimitSide (PaddleOCR's det_limit_side_len, limit type "max"): the
	// image is scaled so its longer side is at most LimitSide, then each
	// side rounded to a multiple of 32 (at least 32).
	LimitSide int
	// NCHW lays the output out planar [1,3,H,W]; the default is NHWC
	// [1,H,W,3].
	NCHW bool
	// Mean and Std normalise each RGB channel in [0,1]: (v-mean)/std.
	// Zero Std means 1.
	Mean, Std [3]float64
}

// BlazeFace is the 128x128 front model's input: NHWC in [-1,1].
var BlazeFace = ImageSpec{Width: 128, Height: 128, Mean: [3]float64{0.5, 0.5, 0.5}, Std: [3]float64{0.5, 0.5, 0.5}}

// PaddleDet is PaddleOCR's detector input: NCHW, ImageNet mean and std,
// longer side at most 960 in multiples of 32.
var PaddleDet = ImageSpec{LimitSide: 960, NCHW: true, Mean: [3]float64{0.485, 0.456, 0.406}, Std: [3]float64{0.229, 0.224, 0.225}}

// DecodeImage decodes a JPEG or PNG.
func DecodeImage(b []byte) (image.Image, error) { return decodeImage(context.Background(), b) }

// ErrTooLarge reports an image over DecodeImageLimit's pixel limit.
var ErrTooLarge = errors.New("prepost: image over the pixel limit")

// DecodeImageLimit decodes a JPEG or PNG whose pixels are at most
// maxPixels (read from its header before any pixel is decoded), stopping
// with ctx's error: the decoders read the bytes through a reader that
// checks ctx, so a large image is interrupted within one read (4 KiB).
// For callers that decode untrusted bytes under a deadline and a memory
// budget (the host's image primitive).
func DecodeImageLimit(ctx context.Context, b []byte, maxPixels int64) (image.Image, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return nil, decodeError(b, err)
	}
	if px := int64(cfg.Width) * int64(cfg.Height); px > maxPixels {
		return nil, fmt.Errorf("%w: %s image of %dx%d = %d pixels, the limit is %d", ErrTooLarge, format, cfg.Width, cfg.Height, px, maxPixels)
	}
	return decodeImage(ctx, b)
}

// decodeImage decodes b, through a reader that checks ctx when ctx can be
// cancelled.
func decodeImage(ctx context.Context, b []byte) (image.Image, error) {
	var r io.Reader = bytes.NewReader(b)
	if ctx.Done() != nil {
		r = &ctxReader{ctx: ctx, r: bytes.NewReader(b)}
	}
	img, _, err := image.Decode(r)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, decodeError(b, err)
	}
	return img, nil
}

func decodeError(b []byte, err error) error {
	return fmt.Errorf("prepost: decode image (%d bytes; JPEG or PNG expected): %w", len(b), err)
}

// ctxReader fails its reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   *bytes.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// OutputSize is the model input size for a w x h image.
func (s ImageSpec) OutputSize(w, h int) (int, int) {
	if s.Width > 0 && s.Height > 0 {
		return s.Width, s.Height
	}
	ratio := 1.0
	if m := max(w, h); s.LimitSide > 0 && m > s.LimitSide {
		ratio = float64(s.LimitSide) / float64(m)
	}
	r32 := func(v int) int { return max(32, int(math.Round(float64(v)*ratio/32))*32) }
	return r32(w), r32(h)
}

// Preprocess scales img to the spec's size (bilinear, half-pixel centres,
// aspect ratio not kept) and normalises it into a new slice laid out as the
// spec says; it returns the output width and height.
func Preprocess(img image.Image, s ImageSpec) ([]float32, int, int) {
	b := img.Bounds()
	ow, oh := s.OutputSize(b.Dx(), b.Dy())
	return resample(img, s, ow, oh), ow, oh
}

// resample is Preprocess to an output of ow x oh.
func resample(img image.Image, s ImageSpec, ow, oh int) []float32 {
	b := img.Bounds()
	return resampleFrom(img, s, ow, oh, 0, 0, float64(b.Dx()), float64(b.Dy()))
}

// resampleFrom is resample of the part of img that starts at (x0, y0) and
// is w x h of its pixels, in fractions of a pixel where a crop does not
// fall on the pixels of a reduced decode (PrepareImage).
func resampleFrom(img image.Image, s ImageSpec, ow, oh int, x0, y0, w, h float64) []float32 {
	b := img.Bounds()
	dst := make([]float32, 3*ow*oh)
	src := newSampler(img)
	sx := w / float64(ow)
	sy := h / float64(oh)
	scale, shift := s.normaliser()
	xs := make([]struct {
		x0, x1 int
		w      float64
	}, ow)
	for x := range ow {
		fx := x0 + (float64(x)+0.5)*sx - 0.5
		x0 := int(math.Floor(fx))
		xs[x].w = fx - float64(x0)
		xs[x].x0 = min(max(x0, 0), b.Dx()-1)
		xs[x].x1 = min(max(x0+1, 0), b.Dx()-1)
	}
	plane := ow * oh
	for y := range oh {
		fy := y0 + (float64(y)+0.5)*sy - 0.5
		iy := int(math.Floor(fy))
		wy := fy - float64(iy)
		r0 := min(max(iy, 0), b.Dy()-1)
		r1 := min(max(iy+1, 0), b.Dy()-1)
		for x := range ow {
			c := xs[x]
			p00, p10, p01, p11 := src.at(c.x0, r0), src.at(c.x1, r0), src.at(c.x0, r1), src.at(c.x1, r1)
			wx := c.w
			for ch := range 3 {
				v := (p00[ch]*(1-wx)+p10[ch]*wx)*(1-wy) + (p01[ch]*(1-wx)+p11[ch]*wx)*wy
				s.put(dst, plane, (y*ow + x), ch, (v-shift[ch])*scale[ch])
			}
		}
	}
	return dst
}

// normaliser is the spec's per-channel 1/std and mean (a zero std is 1).
func (s ImageSpec) normaliser() (scale, shift [3]float64) {
	for c := range 3 {
		std := s.Std[c]
		if std == 0 {
			std = 1
		}
		scale[c], shift[c] = 1/std, s.Mean[c]
	}
	return scale, shift
}

// put stores channel ch of output pixel i (of plane pixels) as the spec
// lays the output out.
func (s ImageSpec) put(dst []float32, plane, i, ch int, v float64) {
	if s.NCHW {
		dst[ch*plane+i] = float32(v)
	} else {
		dst[i*3+ch] = float32(v)
	}
}

// sampler reads pixels as RGB in [0,1] with the exact values of
// color.Color.RGBA()/65535, without an interface call and allocation per
// pixel for the common decoded types.
type sampler struct {
	img   image.Image
	minX  int
	minY  int
	ycc   *image.YCbCr
	rgba  *image.RGBA
	nrgba *image.NRGBA
	gray  *image.Gray
}

func newSampler(img image.Image) sampler {
	s := sampler{img: img, minX: img.Bounds().Min.X, minY: img.Bounds().Min.Y}
	switch m := img.(type) {
	case *image.YCbCr:
		s.ycc = m
	case *image.RGBA:
		s.rgba = m
	case *image.NRGBA:
		s.nrgba = m
	case *image.Gray:
		s.gray = m
	}
	return s
}

func (s sampler) at(x, y int) [3]float64 {
	x += s.minX
	y += s.minY
	var r, g, b uint32
	switch {
	case s.ycc != nil:
		r, g, b, _ = s.ycc.YCbCrAt(x, y).RGBA()
	case s.rgba != nil:
		r, g, b, _ = s.rgba.RGBAAt(x, y).RGBA()
	case s.nrgba != nil:
		r, g, b, _ = s.nrgba.NRGBAAt(x, y).RGBA()
	case s.gray != nil:
		r, g, b, _ = s.gray.GrayAt(x, y).RGBA()
	default:
		r, g, b, _ = s.img.At(x, y).RGBA()
	}
	return [3]float64{float64(r) / 65535, float64(g) / 65535, float64(b) / 65535}
}

// RGB wraps packed 8-bit RGB pixels [h][w][3] as an image (for callers
// that have raw camera frames rather than encoded files).
func RGB(pix []byte, w, h int) (image.Image, error) {
	if w <= 0 || h <= 0 || len(pix) != w*h*3 {
		return nil, fmt.Errorf("prepost: %d bytes of RGB for %dx%d (want %d)", len(pix), w, h, w*h*3)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range w * h {
		copy(img.Pix[4*i:4*i+3], pix[3*i:3*i+3])
		img.Pix[4*i+3] = 0xff
	}
	return img, nil
}

// Crop returns the part r of img (r in pixels from the image's top left).
func Crop(img image.Image, r image.Rectangle) (image.Image, error) {
	sub, ok := img.(interface {
		SubImage(image.Rectangle) image.Image
	})
	r = r.Add(img.Bounds().Min).Intersect(img.Bounds())
	if !ok || r.Empty() {
		return nil, fmt.Errorf("prepost: crop %v is outside the %v image", r, img.Bounds())
	}
	return sub.SubImage(r), nil
}
