package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
)

// writeTestBundle writes a one-shot bundle holding model, sealed with its
// manifest (pkg/bundle lists each file's size and sha256).
func writeTestBundle(t *testing.T, version string, model []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	m := &bundle.Manifest{Name: "tiny", Version: version, Kind: bundle.KindOneShot, Model: "model.onnx", Quantization: "fp32", CreatedBy: "test"}
	if err := bundle.Write(dir, m, "model.onnx"); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestModelsCommand(t *testing.T) {
	db := filepath.Join(t.TempDir(), "models.db")
	model1 := bytes.Repeat([]byte("weights-1 "), 50000)
	model2 := bytes.Repeat([]byte("weights-2 "), 50000)
	b1, b2 := writeTestBundle(t, "1", model1), writeTestBundle(t, "2", model2)
	out := t.TempDir()

	run := func(args ...string) (string, int) {
		var stdout, stderr bytes.Buffer
		code := runMain(context.Background(), &stdout, &stderr, append([]string{"models", "--store", db}, args...))
		return stdout.String() + stderr.String(), code
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"import", b1}, 0, "tiny@1"},
		{[]string{"import", b2}, 0, "tiny@2"},
		{[]string{"ls"}, 0, "*  tiny@1"},
		{[]string{"activate", "tiny@2"}, 0, "tiny@2 active"},
		{[]string{"ls"}, 0, "-  tiny@1"},
		{[]string{"rollback", "tiny"}, 0, "tiny@1 active"},
		{[]string{"verify"}, 0, "ok: 2 versions"},
		{[]string{"export", "tiny@2", out}, 0, "tiny@2 -> "},
		{[]string{"rm", "tiny@1"}, 1, "version is active"},
		{[]string{"rm", "tiny@2"}, 0, "removed tiny@2"},
		{[]string{"gc"}, 0, "freed 2 chunks"},
		{[]string{"activate", "tiny@9"}, 1, "not found"},
		{[]string{"frobnicate"}, 2, "unknown subcommand"},
		{[]string{"import"}, 2, "takes 1 argument"},
	}
	for _, tc := range tests {
		got, code := run(tc.args...)
		if code != tc.code || !strings.Contains(got, tc.want) {
			t.Fatalf("models %v: exit %d, output %q; want exit %d containing %q", tc.args, code, got, tc.code, tc.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, "model.onnx")); err != nil || !bytes.Equal(b, model2) {
		t.Fatalf("exported model differs: %v", err)
	}

	// Corrupt the remaining model's bytes in the closed store file.
	raw, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(raw, model1[1000:1100])
	if at < 0 {
		t.Fatal("model bytes not found in store")
	}
	raw[at] ^= 1
	if err := os.WriteFile(db, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	got, code := run("verify")
	if code != 1 || !strings.Contains(got, "CORRUPT model tiny@1 file model.onnx") {
		t.Fatalf("verify of a corrupt store: exit %d, %q", code, got)
	}
}

func TestDefaultStorePath(t *testing.T) {
	t.Setenv("EDGEINFER_STORE", "/x/models.db")
	if got := defaultStorePath(); got != "/x/models.db" {
		t.Fatal(got)
	}
	t.Setenv("EDGEINFER_STORE", "")
	t.Setenv("HOME", "/home/u")
	if got := defaultStorePath(); got != "/home/u/.local/share/edgeinfer/models.db" {
		t.Fatal(got)
	}
}
