//go:build cgo

package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/npy"
	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/resize"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"google.golang.org/protobuf/proto"
)

func init() {
	register(&command{
		name:    "run",
		summary: "run an ONNX model N times on given or random inputs; print provider and latency",
		run:     runRun,
	})
}

func runRun(ctx context.Context, w io.Writer, args []string) error {
	fs := newFlagSet("run")
	var inputs, dims multiFlag
	fs.Var(&inputs, "input", "input data, [NAME=]FILE (repeatable): .npy, TensorProto .pb, or a .jpg/.png image (resized to the input's H,W; NHWC or NCHW)")
	fs.Var(&dims, "dim", "size of a symbolic dimension, NAME=VALUE (repeatable); unnamed dynamic dims default to 1")
	runs := fs.Int("runs", 100, "timed runs")
	warmup := fs.Int("warmup", 3, "untimed runs first")
	threads := fs.Int("threads", 0, "intra-op threads (0: ONNX Runtime default)")
	providers := fs.String("provider", "", "execution providers to try in order, e.g. cuda,cpu (default: the full chain)")
	lib := fs.String("lib", "", "ONNX Runtime library (default: $ONNXRUNTIME_LIB, then the `make setup` cache)")
	imageRange := fs.String("image-range", "0,1", "pixel value range for image inputs: 0,1 | -1,1 | 0,255")
	seed := fs.Uint64("seed", 1, "seed of random inputs")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *runs < 1 {
		return fmt.Errorf("%w: run MODEL.onnx|BUNDLE [--input FILE] [--runs N] [--dim name=value] [--threads N] [--provider list]", errUsage)
	}
	opts := ort.Options{LibraryPath: *lib, IntraOpThreads: *threads}
	if *providers != "" {
		if opts.Providers, err = ort.ParseProviders(*providers); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	if pluginBundle(pos[0]) { // pre -> model -> post: cmd_run_bundle.go
		return runBundle(ctx, w, pos[0], inputs, opts, *warmup, *runs)
	}
	dimSizes := map[string]int64{}
	for _, d := range dims {
		name, val, ok := strings.Cut(d, "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if !ok || err != nil || n < 0 {
			return fmt.Errorf("%w: --dim %q: want name=size", errUsage, d)
		}
		dimSizes[name] = n
	}
	opts.ProbeDims = dimSizes

	model, err := oneShotModel(pos[0])
	if err != nil {
		return err
	}
	s, err := ort.NewSessionFromFile(ctx, model, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	if isDecoder(s.Info()) {
		return errDecoder(model)
	}
	if err := checkDims(s.Inputs(), dimSizes); err != nil {
		return err
	}
	files := map[string]string{}
	for i, in := range inputs {
		name, file, ok := strings.Cut(in, "=")
		if !ok || strings.ContainsAny(name, `/\`) {
			if i >= len(s.Inputs()) {
				return fmt.Errorf("%w: --input %q: name it NAME=FILE", errUsage, in)
			}
			name, file = s.Inputs()[i].Name, in
		}
		if !hasInput(s.Inputs(), name) {
			return fmt.Errorf("%w: --input %q: the model has no input %q; its inputs are %s", errUsage, in, name, describeInputs(s.Inputs()))
		}
		files[name] = file
	}
	fmt.Fprintf(w, "model: %s\nonnx runtime: %s (%s)\nprovider: %s\n", model, ort.Version(), ort.LibraryPath(), s.Provider())
	for _, a := range s.ProviderAttempts() {
		if !a.Chosen {
			fmt.Fprintf(w, "  skipped %s\n", a)
		}
	}
	fmt.Fprintf(w, "load: %.1f ms\n", float64(s.LoadTime())/1e6)

	lo, hi, err := parseRange(*imageRange)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(*seed, *seed))
	feeds := map[string]*ort.Tensor{}
	defer ort.CloseAll(feeds)
	for _, v := range s.Inputs() {
		shape := make([]int64, len(v.Shape))
		for i, d := range v.Shape {
			shape[i] = d
			if d < 0 {
				shape[i] = 1
				if i < len(v.DimNames) {
					if n, ok := dimSizes[v.DimNames[i]]; ok {
						shape[i] = n
					}
				}
			}
		}
		var t *ort.Tensor
		src := "random"
		if f, ok := files[v.Name]; ok {
			src = f
			t, err = loadInput(f, v, shape, lo, hi)
		} else {
			t, err = randomTensor(rng, v.DType, shape)
		}
		if err != nil {
			return fmt.Errorf("input %q: %w", v.Name, err)
		}
		feeds[v.Name] = t
		fmt.Fprintf(w, "input %s: %s%v from %s\n", v.Name, t.DType(), t.Shape(), src)
	}

	var last map[string]*ort.Tensor
	defer func() { ort.CloseAll(last) }()
	lat := make([]time.Duration, 0, *runs)
	for i := range *warmup + *runs {
		ort.CloseAll(last)
		start := time.Now()
		last, err = s.Run(ctx, feeds)
		if err != nil {
			return err
		}
		if i >= *warmup {
			lat = append(lat, time.Since(start))
		}
	}
	pct := percentiles(lat)
	fmt.Fprintf(w, "latency over %d runs (after %d warm-up): p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  max %.3f ms\n",
		len(lat), *warmup, pct(50), pct(90), pct(99), pct(100))
	for _, v := range s.Outputs() {
		t := last[v.Name]
		fmt.Fprintf(w, "output %s: %s%v %s\n", v.Name, t.DType(), t.Shape(), preview(t))
	}
	return nil
}

func parseRange(s string) (float64, float64, error) {
	a, b, ok := strings.Cut(s, ",")
	lo, err1 := strconv.ParseFloat(a, 64)
	hi, err2 := strconv.ParseFloat(b, 64)
	if !ok || err1 != nil || err2 != nil || hi <= lo {
		return 0, 0, fmt.Errorf("%w: --image-range %q: want lo,hi", errUsage, s)
	}
	return lo, hi, nil
}

// randomTensor fills a tensor of the declared type: floats uniform in
// [0,1), integers in [0,10) (safe as ids and indices), bools at random.
func randomTensor(rng *rand.Rand, dt ort.DType, shape []int64) (*ort.Tensor, error) {
	t, err := ort.NewEmptyTensor(dt, shape)
	if err != nil {
		return nil, err
	}
	b := t.Bytes()
	size := dt.Size()
	for i := 0; i < t.Len(); i++ {
		e := b[i*size : (i+1)*size]
		switch dt {
		case ort.Float32:
			binary.LittleEndian.PutUint32(e, math.Float32bits(rng.Float32()))
		case ort.Float64:
			binary.LittleEndian.PutUint64(e, math.Float64bits(rng.Float64()))
		case ort.Float16:
			binary.LittleEndian.PutUint16(e, uint16(ort.Float16FromFloat32(rng.Float32())))
		case ort.BFloat16:
			binary.LittleEndian.PutUint16(e, uint16(math.Float32bits(rng.Float32())>>16))
		case ort.Bool:
			e[0] = byte(rng.IntN(2))
		default:
			e[0] = byte(rng.IntN(10)) // little-endian: the low byte carries the value
		}
	}
	return t, nil
}

// loadInput reads one input file by extension.
func loadInput(path string, v ort.ValueInfo, shape []int64, lo, hi float64) (*ort.Tensor, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".npy":
		return loadNPY(path)
	case ".pb":
		return loadTensorProto(path)
	case ".jpg", ".jpeg", ".png":
		return loadImage(path, v, shape, lo, hi)
	}
	return nil, fmt.Errorf("%s: unknown input format (want .npy, .pb, .jpg or .png)", path)
}

// npyTypes maps the .npy dtypes pkg/npy reads to tensor element types.
var npyTypes = map[string]ort.DType{
	"<f4": ort.Float32, "<f8": ort.Float64, "<f2": ort.Float16, "<i8": ort.Int64, "<i4": ort.Int32,
	"<i2": ort.Int16, "|i1": ort.Int8, "|u1": ort.Uint8, "<u2": ort.Uint16, "<u4": ort.Uint32,
	"<u8": ort.Uint64, "|b1": ort.Bool,
}

// loadNPY reads a NumPy .npy file as a tensor of its own dtype and shape.
func loadNPY(path string) (*ort.Tensor, error) {
	a, err := npy.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dt, ok := npyTypes[a.Descr]
	if !ok {
		return nil, fmt.Errorf("%s: dtype %q has no tensor type", path, a.Descr)
	}
	return ort.CopyBytes(dt, a.Shape, a.Data)
}

// loadImage resizes an image (bilinear) to the input's spatial size: NHWC
// when the last dimension is 3, NCHW when the second is; values scaled to
// [lo,hi].
func loadImage(path string, v ort.ValueInfo, shape []int64, lo, hi float64) (*ort.Tensor, error) {
	if v.DType != ort.Float32 || len(shape) != 4 {
		return nil, fmt.Errorf("image input needs a float32 4-D input, model has %s", v)
	}
	nhwc := shape[3] == 3
	if !nhwc && shape[1] != 3 {
		return nil, fmt.Errorf("image input needs 3 channels (NHWC or NCHW), model has %s", v)
	}
	h, wd := shape[2], shape[3]
	if nhwc {
		h, wd = shape[1], shape[2]
	}
	if h <= 0 || wd <= 0 {
		return nil, fmt.Errorf("image input needs a height and width above 0, model has %s (set them with --dim)", v)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, _, err := image.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t, err := ort.NewEmptyTensor(ort.Float32, shape)
	if err != nil {
		return nil, err
	}
	dst, _ := ort.Data[float32](t)
	layout := resize.CHW
	if nhwc {
		layout = resize.HWC
	}
	px := resize.Bilinear(img, int(wd), int(h), layout)
	for n := range int(shape[0]) { // every batch entry gets the image
		for i, v := range px {
			dst[n*len(px)+i] = float32(lo + float64(v)*(hi-lo))
		}
	}
	return t, nil
}

func preview(t *ort.Tensor) string {
	if t.DType() != ort.Float32 {
		return ""
	}
	d, _ := ort.Data[float32](t)
	n := min(len(d), 4)
	var parts []string
	for _, f := range d[:n] {
		parts = append(parts, strconv.FormatFloat(float64(f), 'g', 4, 32))
	}
	if len(d) > n {
		parts = append(parts, "...")
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// loadTensorProto reads a serialised ONNX TensorProto (the format of the
// ONNX backend test data): raw_data or the typed repeated fields.
func loadTensorProto(path string) (*ort.Tensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tp onnx.TensorProto
	if err := proto.Unmarshal(b, &tp); err != nil {
		return nil, fmt.Errorf("%s: not a TensorProto: %w", path, err)
	}
	dt := ort.DType(tp.GetDataType())
	size := dt.Size()
	if size == 0 {
		return nil, fmt.Errorf("%s: unsupported element type %s", path, dt)
	}
	raw := tp.GetRawData()
	if raw == nil {
		var vals []uint64
		switch {
		case len(tp.GetFloatData()) > 0:
			for _, f := range tp.GetFloatData() {
				vals = append(vals, uint64(math.Float32bits(f)))
			}
		case len(tp.GetDoubleData()) > 0:
			for _, f := range tp.GetDoubleData() {
				vals = append(vals, math.Float64bits(f))
			}
		case len(tp.GetInt64Data()) > 0:
			for _, v := range tp.GetInt64Data() {
				vals = append(vals, uint64(v))
			}
		case len(tp.GetUint64Data()) > 0:
			vals = tp.GetUint64Data()
		default:
			for _, v := range tp.GetInt32Data() {
				vals = append(vals, uint64(v))
			}
		}
		raw = make([]byte, len(vals)*size)
		for i, v := range vals {
			switch size {
			case 1:
				raw[i] = byte(v)
			case 2:
				binary.LittleEndian.PutUint16(raw[2*i:], uint16(v))
			case 4:
				binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
			case 8:
				binary.LittleEndian.PutUint64(raw[8*i:], v)
			}
		}
	}
	return ort.CopyBytes(dt, tp.GetDims(), raw)
}

// percentiles sorts d and returns its nearest-rank percentile in ms.
func percentiles(d []time.Duration) func(p float64) float64 {
	slices.Sort(d)
	return func(p float64) float64 {
		i := int(math.Ceil(p/100*float64(len(d)))) - 1
		return float64(d[min(max(i, 0), len(d)-1)]) / 1e6
	}
}
