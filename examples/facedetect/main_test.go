package main

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAnchors(t *testing.T) {
	a := Anchors()
	if len(a) != 896 {
		t.Fatalf("%d anchors, want 896", len(a))
	}
	if a[0] != [2]float64{0.5 / 16, 0.5 / 16} || a[512] != [2]float64{0.5 / 8, 0.5 / 8} || a[517] != a[512] {
		t.Errorf("anchor layout: %v %v %v", a[0], a[512], a[517])
	}
}

func TestDecode(t *testing.T) {
	scores := make([]float32, 896)
	boxes := make([]float32, 896*16)
	for i := range scores {
		scores[i] = -10
	}
	// Two overlapping confident boxes at anchor 0 and 1 (same centre), one
	// far away below threshold.
	for _, i := range []int{0, 1} {
		scores[i] = 3
		copy(boxes[16*i:], []float32{0, 0, 12.8, 12.8})
	}
	scores[600] = 0.5 // sigmoid 0.62 < 0.75
	faces := Decode(scores, boxes, 0.75)
	if len(faces) != 1 {
		t.Fatalf("faces %v, want 1 after weighted NMS", faces)
	}
	f := faces[0]
	if d := f.XMax - f.XMin; d < 0.099 || d > 0.101 {
		t.Errorf("width %v, want 0.1", d)
	}
}

// TestDetect runs the real model when `make demo` (or the cache) has it.
func TestDetect(t *testing.T) {
	home, _ := os.UserCacheDir()
	model := filepath.Join("..", "..", "out", "demo", "face_detection_front_128x128_barracuda.onnx")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("no model at %s (run make demo); cache %s", model, home)
	}
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	for i := range img.Pix {
		img.Pix[i] = 128
	}
	img.Set(1, 1, color.White)
	res, err := Detect(context.Background(), model, img, Config{Runs: 3, Threads: 1, Threshold: 0.75})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Faces) != 0 {
		t.Errorf("faces in a grey image: %v", res.Faces)
	}
	var buf bytes.Buffer
	res.Print(&buf, img.Bounds())
	if !strings.Contains(buf.String(), "provider: ") || !strings.Contains(buf.String(), "faces found: 0") {
		t.Errorf("report:\n%s", buf.String())
	}
}
