// Package resize turns an image into the RGB values a vision model reads:
// resized with bilinear interpolation to the model's width and height, in
// [0, 1], laid out channels-first (CHW) or channels-last (HWC). It is the
// one resize the CLI's `run --input photo.jpg` and quant's calibration
// images share; callers scale or normalise the values for their model.
//
// Sampling follows ONNX Resize's half_pixel coordinates (pixel centres
// aligned, what PyTorch's align_corners=False and OpenCV's INTER_LINEAR
// do), with edge pixels repeated beyond the border. No antialiasing: a
// large downscale aliases, as those libraries' defaults do.
package resize

import "image"

// Layout is where the channel dimension goes.
type Layout int

const (
	// CHW is planar: all red values, then green, then blue (NCHW models).
	CHW Layout = iota
	// HWC is packed: R, G, B of each pixel together (NHWC models).
	HWC
)

// Bilinear resizes img to w×h and returns its 3·w·h RGB values in [0, 1]
// in the given layout. Alpha is ignored (premultiplied colour as Go's
// image.Image returns it). It panics if w or h is not positive.
func Bilinear(img image.Image, w, h int, layout Layout) []float32 {
	if w <= 0 || h <= 0 {
		panic("resize: non-positive size")
	}
	src, sw, sh := rgb(img)
	out := make([]float32, 3*w*h)
	if sw == 0 || sh == 0 {
		return out
	}
	for y := range h {
		fy := max((float64(y)+0.5)*float64(sh)/float64(h)-0.5, 0)
		y0 := min(int(fy), sh-1)
		y1, dy := min(y0+1, sh-1), float32(fy-float64(y0))
		for x := range w {
			fx := max((float64(x)+0.5)*float64(sw)/float64(w)-0.5, 0)
			x0 := min(int(fx), sw-1)
			x1, dx := min(x0+1, sw-1), float32(fx-float64(x0))
			for c := range 3 {
				at := func(yy, xx int) float32 { return src[(yy*sw+xx)*3+c] }
				top := at(y0, x0)*(1-dx) + at(y0, x1)*dx
				bot := at(y1, x0)*(1-dx) + at(y1, x1)*dx
				v := top*(1-dy) + bot*dy
				if layout == HWC {
					out[(y*w+x)*3+c] = v
				} else {
					out[c*h*w+y*w+x] = v
				}
			}
		}
	}
	return out
}

// rgb copies img into packed RGB values in [0, 1] (one At call per source
// pixel rather than four per output value).
func rgb(img image.Image) ([]float32, int, int) {
	b := img.Bounds()
	out := make([]float32, 0, 3*b.Dx()*b.Dy())
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			out = append(out, float32(r)/0xffff, float32(g)/0xffff, float32(bl)/0xffff)
		}
	}
	return out, b.Dx(), b.Dy()
}
