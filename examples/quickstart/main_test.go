package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// The program runs the tiny trained model beside a camera model and prints
// every request the engine recorded: the answer's, and each frame's.
func TestQuickstart(t *testing.T) {
	orttest.Need(t)
	dir := t.TempDir()
	if _, err := build.ImportHF(context.Background(), "../tinylm", dir, build.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), &out, dir, orttest.CameraModel(t), "Call me Ishmael", 16, 5); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	t.Log(s)
	if !strings.Contains(s, "answer: ") || !strings.Contains(s, "finish length") && !strings.Contains(s, "finish stop") {
		t.Fatalf("no summary of the answer:\n%s", s)
	}
	if n := strings.Count(s, "camera   infer"); n != 5 {
		t.Fatalf("%d camera records, want 5:\n%s", n, s)
	}
	if n := strings.Count(s, "chat     generate"); n != 1 {
		t.Fatalf("%d chat records, want 1:\n%s", n, s)
	}
}

func TestNoModel(t *testing.T) {
	if err := run(context.Background(), &bytes.Buffer{}, "", "", "x", 1, 0); err == nil || !strings.Contains(err.Error(), "--model") {
		t.Fatalf("missing --model: %v", err)
	}
}
