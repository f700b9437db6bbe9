package plugins_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/plugintest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

// modelFile is a file platforms/models/fetch.sh (make setup) installs.
func modelFile(tb testing.TB, rel string) string {
	tb.Helper()
	root := os.Getenv("EDGEINFER_MODELS")
	if root == "" {
		base, _ := os.UserCacheDir()
		root = filepath.Join(base, "edgeinfer", "models")
	}
	p := filepath.Join(root, filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("no %s (run make setup: platforms/models/fetch.sh)", p)
	}
	return p
}

func readFile(tb testing.TB, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

var plugins sync.Map // name -> *plugin.Plugin, shared by tests and benchmarks

func load(tb testing.TB, name string, cfg plugin.Config) *plugin.Plugin {
	tb.Helper()
	key := name
	if len(cfg.Grants.Dirs) > 0 {
		key += "+dirs"
	}
	if cfg.NoInterrupt {
		key += "+nointerrupt"
	}
	if p, ok := plugins.Load(key); ok {
		return p.(*plugin.Plugin)
	}
	path := plugintest.Build(tb, "runtime/plugin/plugins/"+name)
	// The machines these tests run on are shared: a generous limit keeps
	// a slow moment from failing an equivalence check.
	cfg.CallTimeout = time.Minute
	p, err := plugin.LoadFile(context.Background(), path, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	plugins.Store(key, p)
	return p
}

func call(tb testing.TB, p *plugin.Plugin, in ...abi.Tensor) []abi.Tensor {
	tb.Helper()
	out, err := p.Call(context.Background(), in)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func get(tb testing.TB, ts []abi.Tensor, name string) abi.Tensor {
	tb.Helper()
	t, ok := abi.Find(ts, name)
	if !ok {
		tb.Fatalf("no output %q in %v", name, ts)
	}
	return t
}

func f32(tb testing.TB, t abi.Tensor) []float32 {
	v, err := t.Float32s()
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// session opens a real model on ONNX Runtime (skipped where the library
// is not installed: make setup installs it).
func session(tb testing.TB, rel string) *ort.Session {
	tb.Helper()
	s, err := ort.NewSessionFromFile(context.Background(), modelFile(tb, rel), ort.Options{IntraOpThreads: 1})
	if err != nil {
		tb.Skipf("ONNX Runtime unavailable (run make setup): %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// runModel runs s on one float32 input and returns the float32 outputs.
func runModel(tb testing.TB, s *ort.Session, name string, shape []int64, data []float32) map[string]abi.Tensor {
	tb.Helper()
	in, err := ort.CopyTensor(shape, data)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close()
	out, err := s.Run(context.Background(), map[string]*ort.Tensor{name: in})
	if err != nil {
		tb.Fatal(err)
	}
	defer ort.CloseAll(out)
	res := map[string]abi.Tensor{}
	for n, t := range out {
		v, err := ort.Data[float32](t)
		if err != nil {
			tb.Fatal(err)
		}
		res[n] = abi.F32(n, t.Shape(), append([]float32(nil), v...))
	}
	return res
}

func decode(tb testing.TB, b []byte) image.Image {
	img, err := prepost.DecodeImage(b)
	if err != nil {
		tb.Fatal(err)
	}
	return img
}

func encodePNG(tb testing.TB, img image.Image) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func crop(tb testing.TB, img image.Image, r image.Rectangle) image.Image {
	sub, ok := img.(interface {
		SubImage(image.Rectangle) image.Image
	})
	if !ok {
		tb.Fatalf("%T cannot be cropped", img)
	}
	return sub.SubImage(r.Add(img.Bounds().Min))
}

// maxDiff is the largest absolute difference (Inf on a length mismatch).
func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}
