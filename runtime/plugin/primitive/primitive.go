// Package primitive is the heavy loops a plugin may hand to its host:
// image decode, resize and normalise; weighted non-maximum suppression;
// the best class of each row of a score matrix; DB text boxes. A plugin
// orchestrates (reads its arguments, picks a spec, names its outputs) and
// calls a primitive by name through the host import edgeinfer_host.call
// (runtime/plugin/ABI.md); the primitive runs natively, as the same code
// in package prepost that an application without plugins calls.
//
// Why: compiled to WebAssembly, these loops ran 25–53× slower than native
// Go (wazero checks its deadline at every loop header, and a Go guest
// compiles every branch through one dispatch loop per function); as host
// code they run at native speed. BenchmarkNMS, BenchmarkCTC,
// BenchmarkResize, BenchmarkDecodeResize and BenchmarkDB in
// runtime/plugin/plugins measure each plugin against native Go.
//
// A primitive widens the sandbox by computation only: it sees the tensors
// the plugin passes, never files, the network or the clock. Its input is
// untrusted, so every primitive validates shapes and types, keeps what it
// allocates within Limits (the plugin's memory cap), and stops with its
// context: each one's cost is linear in its input and checked against ctx
// at least once per pass (NMS, whose cost is quadratic, once per merged
// group; image decoding once per 4 KiB read).
//
// Inputs and outputs are abi tensors, as for a plugin's own request:
//
//	image.prepare  image uint8[n] (JPEG/PNG) or rgb uint8[H,W,3]; optional
//	               crop int64[4] (x, y, w, h); width, height, limit_side,
//	               nchw int64 scalars; mean, std float64[3]
//	               → pixels float32 [1,H,W,3] or [1,3,H,W], src_size int64[2] (h, w)
//	nms.weighted   candidates float32[N,5] (score, xmin, ymin, xmax, ymax),
//	               iou float64 scalar → faces float32[M,5]
//	argmax.rows    x float32[..., C] → index int32[rows], value float32[rows]
//	db.boxes       map float32[1,1,H,W] or [H,W]; optional src_size int64[2]
//	               (h, w); thresh, box_thresh, unclip_ratio, min_size
//	               float64 scalars, max_candidates int64 scalar
//	               → boxes float32[N,4] (x0, y0, x1, y1), scores float32[N],
//	               quads float32[N,4,2] (rotated boxes: top-left, top-right,
//	               bottom-right, bottom-left corners; prepost.Quad)
package primitive

import (
	"context"
	"errors"
	"fmt"
	"image"
	"sort"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

// ErrUnknown reports a primitive name this host does not have.
var ErrUnknown = errors.New("primitive: unknown")

// ErrLimit reports an input whose processing would exceed Limits.
var ErrLimit = errors.New("primitive: over the plugin's memory cap")

// Limits bound what a primitive allocates on the host for one call.
type Limits struct {
	// MaxBytes is the most a call may allocate (decoded pixels, its
	// output): the plugin's memory cap, so that handing work to the host
	// does not lift the cap. 0 means no limit (native callers).
	MaxBytes int64
}

func (l Limits) allow(what string, n int64) error {
	if l.MaxBytes > 0 && n > l.MaxBytes {
		return fmt.Errorf("%w: %s needs %d bytes, the cap is %d (raise the plugin's memory_mb)", ErrLimit, what, n, l.MaxBytes)
	}
	return nil
}

// Func is one primitive.
type Func func(ctx context.Context, in []abi.Tensor, lim Limits) ([]abi.Tensor, error)

var table = map[string]Func{
	"image.prepare": imagePrepare,
	"nms.weighted":  nmsWeighted,
	"argmax.rows":   argmaxRows,
	"db.boxes":      dbBoxes,
}

// Names lists the primitives, sorted.
func Names() []string {
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Run runs the primitive called name on in. Errors name the primitive.
func Run(ctx context.Context, name string, in []abi.Tensor, lim Limits) ([]abi.Tensor, error) {
	f, ok := table[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (this host has %v)", ErrUnknown, name, Names())
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	out, err := f(ctx, in, lim)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("primitive %s: %w", name, err)
	}
	return out, nil
}

// scalar reads an optional numeric scalar (float64 or int64) called name.
func scalar(in []abi.Tensor, name string, def float64) (float64, error) {
	t, ok := abi.Find(in, name)
	if !ok {
		return def, nil
	}
	if t.Elements() != 1 {
		return 0, fmt.Errorf("input %v: want a scalar", t)
	}
	switch t.DType {
	case abi.Float64:
		v, err := t.Float64s()
		if err != nil {
			return 0, err
		}
		return v[0], nil
	case abi.Int64:
		v, err := t.Int64s()
		if err != nil {
			return 0, err
		}
		return float64(v[0]), nil
	}
	return 0, fmt.Errorf("input %v: want float64 or int64", t)
}

// triple reads an optional float64[3] called name.
func triple(in []abi.Tensor, name string) ([3]float64, error) {
	t, ok := abi.Find(in, name)
	if !ok {
		return [3]float64{}, nil
	}
	v, err := t.Float64s()
	if err != nil || len(v) != 3 {
		return [3]float64{}, fmt.Errorf("input %v: want float64[3]", t)
	}
	return [3]float64(v), nil
}

// imageSpec reads the resize and normalisation a caller asks for.
func imageSpec(in []abi.Tensor) (prepost.ImageSpec, error) {
	var s prepost.ImageSpec
	var nums [4]float64
	for i, n := range []string{"width", "height", "limit_side", "nchw"} {
		v, err := scalar(in, n, 0)
		if err != nil {
			return s, err
		}
		if v < 0 || v > 1<<15 {
			return s, fmt.Errorf("input %s = %g: want 0 to 32768", n, v)
		}
		nums[i] = v
	}
	s.Width, s.Height, s.LimitSide, s.NCHW = int(nums[0]), int(nums[1]), int(nums[2]), nums[3] != 0
	if (s.Width == 0 || s.Height == 0) && s.LimitSide == 0 {
		return s, errors.New("no output size: give width and height, or limit_side")
	}
	var err error
	if s.Mean, err = triple(in, "mean"); err != nil {
		return s, err
	}
	s.Std, err = triple(in, "std")
	return s, err
}

func imagePrepare(ctx context.Context, in []abi.Tensor, lim Limits) ([]abi.Tensor, error) {
	spec, err := imageSpec(in)
	if err != nil {
		return nil, err
	}
	var crop image.Rectangle
	if c, ok := abi.Find(in, "crop"); ok {
		v, err := c.Int64s()
		if err != nil || len(v) != 4 {
			return nil, fmt.Errorf("input crop is %v, want int64 [4] (x, y, w, h)", c)
		}
		if crop = image.Rect(int(v[0]), int(v[1]), int(v[0]+v[2]), int(v[1]+v[3])); crop.Empty() {
			return nil, fmt.Errorf("input crop %v is empty", v)
		}
	}
	var p prepost.Prepared
	if t, ok := abi.Find(in, "rgb"); ok {
		if t.DType != abi.Uint8 || len(t.Shape) != 3 || t.Shape[2] != 3 {
			return nil, fmt.Errorf("input rgb is %v, want uint8 [H,W,3]", t)
		}
		if err := lim.allow("the rgb image as RGBA", 4*t.Shape[0]*t.Shape[1]); err != nil {
			return nil, err
		}
		img, err := prepost.RGB(t.Data, int(t.Shape[1]), int(t.Shape[0]))
		if err != nil {
			return nil, err
		}
		if crop != (image.Rectangle{}) {
			if img, err = prepost.Crop(img, crop); err != nil {
				return nil, err
			}
		}
		b := img.Bounds()
		ow, oh := spec.OutputSize(b.Dx(), b.Dy())
		if err := lim.allow(fmt.Sprintf("a %dx%d float32 output", ow, oh), 12*int64(ow)*int64(oh)); err != nil {
			return nil, err
		}
		p.Data, p.Width, p.Height = prepost.Preprocess(img, spec)
		p.Source = b.Size()
	} else if t, ok := abi.Find(in, "image"); ok && t.DType == abi.Uint8 {
		// Decoded pixels take at most 4 bytes each (RGBA; JPEG's YCbCr
		// takes 1.5–3).
		maxPixels := int64(1) << 62
		if lim.MaxBytes > 0 {
			maxPixels = lim.MaxBytes / 4
		}
		p, err = prepost.PrepareImage(ctx, t.Data, maxPixels, lim.MaxBytes, crop, spec)
		if errors.Is(err, prepost.ErrTooLarge) {
			err = fmt.Errorf("%w: %w (decoding takes 4 bytes a pixel; raise the plugin's memory_mb)", ErrLimit, err)
		}
		if err != nil {
			return nil, err
		}
	} else {
		return nil, errors.New("no input image (uint8 encoded JPEG/PNG) or rgb (uint8 [H,W,3])")
	}
	shape := []int64{1, int64(p.Height), int64(p.Width), 3}
	if spec.NCHW {
		shape = []int64{1, 3, int64(p.Height), int64(p.Width)}
	}
	return []abi.Tensor{
		abi.F32("pixels", shape, p.Data),
		abi.I64("src_size", []int64{2}, []int64{int64(p.Source.Y), int64(p.Source.X)}),
	}, nil
}
