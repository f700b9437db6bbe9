package quant

import (
	"fmt"
	"image"
	_ "image/jpeg" // calibration images
	_ "image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/resize"
)

// InputSpec is a model input as declared: name, element type and shape
// with -1 for a symbolic dimension.
type InputSpec struct {
	Name  string
	DType onnx.TensorProto_DataType
	Shape []int64
}

func (s InputSpec) String() string {
	return fmt.Sprintf("%s %s%s", s.Name, onnx.TypeName(s.DType), shapeString(s.Shape))
}

// ImageOptions say how an image becomes a model input: resized, scaled to
// [0, 1], normalised per channel, laid out NCHW (or NHWC when the model's
// last dimension is 3 and its second is not). It is plain data.
type ImageOptions struct {
	// Size is the longer side for models with symbolic H and W; each side
	// is then rounded to a multiple of Multiple. Fixed H and W are used as
	// they are. 0 means 640.
	Size int
	// Multiple rounds symbolic H and W (PaddleOCR's detector wants 32);
	// 0 means 32.
	Multiple int
	// Mean and Std normalise each RGB channel after scaling to [0, 1];
	// zero values mean ImageNet's (0.485, 0.456, 0.406) / (0.229, 0.224, 0.225).
	Mean, Std [3]float32
}

func (o ImageOptions) withDefaults() ImageOptions {
	if o.Size <= 0 {
		o.Size = 640
	}
	if o.Multiple <= 0 {
		o.Multiple = 32
	}
	if o.Std == ([3]float32{}) {
		o.Mean, o.Std = [3]float32{0.485, 0.456, 0.406}, [3]float32{0.229, 0.224, 0.225}
	}
	return o
}

// LoadSamples reads a calibration directory for a model with one float32
// input: every .jpg/.jpeg/.png (resized and normalised per opts) and every
// .npy (float32, used as it is), sorted by name. A tensor whose rank, or a
// fixed dimension, differs from the input's is refused with ErrCalibration
// naming the file, the input, the expected and the given shape.
func LoadSamples(dir string, in InputSpec, opts ImageOptions) ([]Sample, error) {
	if in.DType != onnx.TensorProto_FLOAT {
		return nil, fmt.Errorf("%w: input %s: only float32 inputs are calibrated", ErrCalibration, in)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCalibration, err)
	}
	var samples []Sample
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		var t Tensor
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".jpg", ".jpeg", ".png":
			t, err = loadImage(path, in, opts)
		case ".npy":
			t, err = loadNpyFile(path)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCalibration, path, err)
		}
		if err := fits(in, t.Shape); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCalibration, path, err)
		}
		samples = append(samples, Sample{Name: e.Name(), Inputs: map[string]Tensor{in.Name: t}})
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("%w: %s holds no .jpg, .png or .npy", ErrCalibration, dir)
	}
	return samples, nil
}

// fits checks a tensor's shape against the input's declared one.
func fits(in InputSpec, shape []int64) error {
	if len(shape) != len(in.Shape) {
		return fmt.Errorf("input %q expects rank %d %s, given rank %d %s", in.Name, len(in.Shape), shapeString(in.Shape), len(shape), shapeString(shape))
	}
	for i, d := range in.Shape {
		if d > 0 && shape[i] != d {
			return fmt.Errorf("input %q expects %s, given %s (dimension %d: %d ≠ %d)", in.Name, shapeString(in.Shape), shapeString(shape), i, shape[i], d)
		}
	}
	return nil
}

func shapeString(s []int64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		if d < 0 {
			parts[i] = "?"
		} else {
			parts[i] = fmt.Sprint(d)
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// imageLayout decides where channels go: NHWC when the last dimension is a
// fixed 3 and the second is not.
func imageLayout(in InputSpec) (nhwc bool, err error) {
	if len(in.Shape) != 4 {
		return false, fmt.Errorf("input %q expects %s: an image needs a rank-4 input", in.Name, shapeString(in.Shape))
	}
	nhwc = in.Shape[3] == 3 && in.Shape[1] != 3
	c := in.Shape[1]
	if nhwc {
		c = in.Shape[3]
	}
	if c > 0 && c != 3 {
		return false, fmt.Errorf("input %q expects %s with %d channels, given an RGB image [1,3,H,W]", in.Name, shapeString(in.Shape), c)
	}
	return nhwc, nil
}

// loadImage decodes, resizes (bilinear) and normalises one image.
func loadImage(path string, in InputSpec, opts ImageOptions) (Tensor, error) {
	opts = opts.withDefaults()
	nhwc, err := imageLayout(in)
	if err != nil {
		return Tensor{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return Tensor{}, err
	}
	defer f.Close()
	img, _, err := image.Decode(f)
	if err != nil {
		return Tensor{}, err
	}
	hDim, wDim := in.Shape[2], in.Shape[3]
	if nhwc {
		hDim, wDim = in.Shape[1], in.Shape[2]
	}
	b := img.Bounds()
	h, w := int(hDim), int(wDim)
	if h <= 0 || w <= 0 {
		scale := float64(opts.Size) / float64(max(b.Dx(), b.Dy()))
		round := func(v float64) int { return max(opts.Multiple, int(v/float64(opts.Multiple)+0.5)*opts.Multiple) }
		if h <= 0 {
			h = round(float64(b.Dy()) * scale)
		}
		if w <= 0 {
			w = round(float64(b.Dx()) * scale)
		}
	}
	layout := resize.CHW
	if nhwc {
		layout = resize.HWC
	}
	data := resize.Bilinear(img, w, h, layout)
	for i, v := range data {
		c := i / (h * w)
		if nhwc {
			c = i % 3
		}
		data[i] = (v - opts.Mean[c]) / opts.Std[c]
	}
	shape := []int64{1, 3, int64(h), int64(w)}
	if nhwc {
		shape = []int64{1, int64(h), int64(w), 3}
	}
	return Tensor{Shape: shape, Data: data}, nil
}

// SampleShapes lists the distinct shapes of samples' input name, for
// messages.
func SampleShapes(samples []Sample, name string) []string {
	var out []string
	for _, s := range samples {
		if str := shapeString(s.Inputs[name].Shape); !slices.Contains(out, str) {
			out = append(out, str)
		}
	}
	return out
}
