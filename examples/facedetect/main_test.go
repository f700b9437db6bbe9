package main

import (
	"bytes"
	"context"
	"image"
	_ "image/jpeg"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/plugintest"
)

func TestAnchors(t *testing.T) {
	a := nativeAnchors()
	if len(a) != 896 || a[0] != [2]float64{0.5 / 16, 0.5 / 16} || a[512] != [2]float64{0.5 / 8, 0.5 / 8} || a[517] != a[512] {
		t.Errorf("anchor layout: %d %v %v %v", len(a), a[0], a[512], a[517])
	}
}

// fixture is the real model and photo (make setup fetches them) and a
// bundle of them with the plugins built from source.
func fixture(tb testing.TB) (model, photo, dir string) {
	base, _ := os.UserCacheDir()
	root := filepath.Join(base, "edgeinfer", "models")
	if r := os.Getenv("EDGEINFER_MODELS"); r != "" {
		root = r
	}
	model = filepath.Join(root, "blazeface", "face_detection_front_128x128_barracuda.onnx")
	photo = filepath.Join(root, "images", "locomotion-nude-male.jpg")
	for _, f := range []string{model, photo} {
		if _, err := os.Stat(f); err != nil {
			tb.Skipf("no %s (run make setup)", f)
		}
	}
	plugintest.Build(tb, "runtime/plugin/plugins/imageprep")
	plugintest.Build(tb, "runtime/plugin/plugins/blazeface")
	dir = tb.TempDir()
	if err := MakeBundle(dir, model, plugintest.Dir(tb), 0.5); err != nil {
		tb.Fatal(err)
	}
	return model, photo, dir
}

// nativeDetect is the example's former Go path on the same crop.
func nativeDetect(tb testing.TB, model string, img image.Image) []Face {
	s, err := ort.NewSessionFromFile(context.Background(), model, ort.Options{IntraOpThreads: 1})
	if err != nil {
		tb.Skipf("ONNX Runtime unavailable (run make setup): %v", err)
	}
	defer s.Close()
	in := make([]float32, size*size*3)
	nativePreprocess(img, in)
	x, _ := ort.CopyTensor([]int64{1, size, size, 3}, in)
	defer x.Close()
	out, err := s.Run(context.Background(), map[string]*ort.Tensor{"input:0": x})
	if err != nil {
		tb.Fatal(err)
	}
	defer ort.CloseAll(out)
	var d [4][]float32
	for i, n := range []string{"Identity:0", "Identity_1:0", "Identity_2:0", "Identity_3:0"} {
		d[i], _ = ort.Data[float32](out[n])
	}
	return nativeDecode(append(slices.Clone(d[0]), d[1]...), append(slices.Clone(d[2]), d[3]...), 0.5)
}

// TestPluginsMatchNative: the bundle (plugins + model) finds the same face
// in the Muybridge crop as the Go code the plugins replaced.
func TestPluginsMatchNative(t *testing.T) {
	model, photo, dir := fixture(t)
	data, _ := os.ReadFile(photo)
	res, err := Detect(context.Background(), dir, data, Config{Runs: 2, Threads: 1, Crop: []int64{15, 535, 70, 70}})
	if err != nil {
		t.Fatal(err)
	}
	img, _, _ := image.Decode(bytes.NewReader(data))
	want := nativeDetect(t, model, img.(interface {
		SubImage(image.Rectangle) image.Image
	}).SubImage(image.Rect(15, 535, 85, 605)))
	if len(want) == 0 || len(res.Faces) != len(want) {
		t.Fatalf("plugins found %v, native %v", res.Faces, want)
	}
	for i := range want {
		g, w := res.Faces[i], want[i]
		for _, d := range []float64{g.Score - w.Score, g.XMin - w.XMin, g.YMin - w.YMin, g.XMax - w.XMax, g.YMax - w.YMax} {
			if math.Abs(d) > 1e-4 {
				t.Errorf("face %d: plugins %+v, native %+v", i, g, w)
				break
			}
		}
	}
	var buf bytes.Buffer
	res.Print(&buf)
	if !strings.Contains(buf.String(), "faces found: 1") || !strings.Contains(buf.String(), "pre plugin:") {
		t.Errorf("report:\n%s", buf.String())
	}
	t.Logf("\n%s", buf.String())
}
