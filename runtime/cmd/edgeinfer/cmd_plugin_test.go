package main

import (
	"bytes"
	"context"
	"image"
	_ "image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/plugintest"
)

// TestPluginRun drives `edgeinfer plugin run` with the sandbox tests'
// hostile plugin: a normal call prints its outputs, an infinite loop stops
// at --timeout with an error, an ungranted file is denied.
func TestPluginRun(t *testing.T) {
	wasm := plugintest.Build(t, "runtime/plugin/testdata/hostile")
	in := filepath.Join(t.TempDir(), "in.bin")
	if err := os.WriteFile(in, []byte{1, 2, 3}, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runPlugin(context.Background(), &out, append([]string{"run", wasm}, args...))
		return out.String(), err
	}
	out, err := run("--input", "x="+in, "--arg", "mode=echo")
	if err != nil || !strings.Contains(out, "output x: uint8[3]") || !strings.Contains(out, "compiler") && !strings.Contains(out, "interpreter") {
		t.Fatalf("echo: %v\n%s", err, out)
	}
	start := time.Now()
	if _, err := run("--input", in, "--arg", "mode=loop", "--timeout", "300ms"); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("loop: %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("loop with --timeout 300ms took %v", d)
	}
	if _, err := run("--input", in, "--arg", "mode=open", "--arg", "arg=/etc/passwd"); err == nil || !strings.Contains(err.Error(), "/etc/passwd") {
		t.Errorf("open /etc/passwd without a grant: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "k.txt"), []byte("granted"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run("--input", in, "--arg", "mode=open", "--arg", "arg=/d/k.txt", "--dir", dir+":/d"); err != nil || !strings.Contains(out, "output data: uint8[7]") {
		t.Errorf("open a granted file: %v\n%s", err, out)
	}
	if _, err := run(); err == nil {
		t.Error("no --input accepted")
	}
}

// TestRunBundle: `edgeinfer run BUNDLE --input face.png` runs the BlazeFace
// bundle's pre plugin, the model and its post plugin, and prints each
// stage's time and the faces.
func TestRunBundle(t *testing.T) {
	dir, photo := plugintest.FaceBundle(t)
	// The face of the Muybridge plate, as a small PNG.
	f, _ := os.Open(photo)
	img, _, err := image.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	face := img.(interface {
		SubImage(image.Rectangle) image.Image
	}).SubImage(image.Rect(15, 535, 85, 605))
	pngPath := filepath.Join(t.TempDir(), "face.png")
	var buf bytes.Buffer
	if err := png.Encode(&buf, face); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pngPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runRun(context.Background(), &out, []string{dir, "--input", pngPath, "--threads", "1", "--runs", "5", "--warmup", "1"}); err != nil {
		if strings.Contains(err.Error(), "library not found") && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	for _, w := range []string{"pre plugin:", "post plugin:", "first request: pre", "time over 5 runs (after 1 warm-up), p50 (p90): pre", "model", "post", "result faces: float32[1 5]"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	t.Logf("\n%s", out.String())
}
