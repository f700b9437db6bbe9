package prepost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost/internal/jpegscale"
)

// Prepared is an encoded image made into a model input (PrepareImage).
type Prepared struct {
	// Data is the input laid out as the spec says; Width x Height its
	// size.
	Data          []float32
	Width, Height int
	// Source is the cropped image's size in the file's pixels: what a
	// detector's boxes scale back to.
	Source image.Point
	// Reduced is 8 or 4 where the JPEG was decoded at that fraction of
	// its size, else 1.
	Reduced int
}

// PrepareImage decodes the JPEG or PNG b, crops it to crop (in the file's
// pixels; the zero rectangle is the whole image) and makes the model input
// spec describes, as DecodeImageLimit, Crop and Preprocess would.
//
// Except that a baseline JPEG at least four times the input's size in both
// directions is decoded at 1/8 or 1/4 of its size (the largest that keeps
// it at least the input's size): each decoded pixel is then the average of
// the 8x8 or 4x4 pixels a full decode gives (package jpegscale says how
// exactly), so the resize samples area averages rather than single pixels
// of a full-size image, and the inverse transform, which most of a full
// decode is, runs on one or four coefficients of each block instead of 64.
// Why: a camera's 1024x708 photo made into BlazeFace's 128x128 input took
// 9x the model's time, nearly all of it the full decode (BenchmarkFrame in
// examples/facedetect, BenchmarkPrepareImage here).
//
// The limits are checked against the file's header before anything is
// decoded: maxPixels the file's pixels, maxOutput the input's bytes (0: no
// limit), either one over is ErrTooLarge; ctx stops the decode (its cause,
// as DecodeImageLimit).
func PrepareImage(ctx context.Context, b []byte, maxPixels, maxOutput int64, crop image.Rectangle, spec ImageSpec) (Prepared, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return Prepared{}, decodeError(b, err)
	}
	if px := int64(cfg.Width) * int64(cfg.Height); px > maxPixels {
		return Prepared{}, fmt.Errorf("%w: %s image of %dx%d = %d pixels, the limit is %d", ErrTooLarge, format, cfg.Width, cfg.Height, px, maxPixels)
	}
	full := image.Rect(0, 0, cfg.Width, cfg.Height)
	r := full
	if crop != (image.Rectangle{}) {
		if r = crop.Intersect(full); r.Empty() {
			return Prepared{}, fmt.Errorf("prepost: crop %v is outside the %v image", crop, full)
		}
	}
	ow, oh := spec.OutputSize(r.Dx(), r.Dy())
	if n := 12 * int64(ow) * int64(oh); maxOutput > 0 && n > maxOutput {
		return Prepared{}, fmt.Errorf("%w: a %dx%d float32 input is %d bytes, the limit is %d", ErrTooLarge, ow, oh, n, maxOutput)
	}
	p := Prepared{Width: ow, Height: oh, Source: r.Size(), Reduced: 1}
	var img image.Image
	if s := reduction(r.Size(), ow, oh); s > 1 && format == "jpeg" {
		img, err = jpegscale.Decode(ctx, b, s, maxPixels)
		switch {
		case err == nil:
			// The crop in the reduced image's pixels, in fractions of one
			// where it does not fall on them: the same sampling positions
			// as the full image's.
			f := float64(s)
			p.Data = resampleFrom(img, spec, ow, oh, float64(r.Min.X)/f, float64(r.Min.Y)/f, float64(r.Dx())/f, float64(r.Dy())/f)
			p.Reduced = s
			return p, nil
		case ctx.Err() != nil:
			return Prepared{}, context.Cause(ctx)
		case errors.Is(err, jpegscale.ErrTooLarge):
			return Prepared{}, fmt.Errorf("%w: %w", ErrTooLarge, err)
		default:
			// Progressive and the like (ErrUnsupported), and what the
			// scaled decoder's stricter reading refuses (ErrFormat: a
			// restart marker out of place, say), take the full decode,
			// which accepts or refuses it as before.
			img = nil
		}
	}
	if img == nil {
		if img, err = decodeImage(ctx, b); err != nil {
			return Prepared{}, err
		}
		if r != full {
			if img, err = Crop(img, r); err != nil {
				return Prepared{}, err
			}
		}
	}
	p.Data = resample(img, spec, ow, oh)
	return p, nil
}

// reduction is the largest of 8 and 4 that keeps an image of size at
// least ow x oh pixels, or 1.
func reduction(size image.Point, ow, oh int) int {
	for _, s := range []int{8, 4} {
		if size.X/s >= ow && size.Y/s >= oh {
			return s
		}
	}
	return 1
}
