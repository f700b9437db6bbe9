package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// cli runs the CLI in-process as a user would call the binary.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = runMain(context.Background(), &o, &e, args)
	return code, o.String(), e.String()
}

func TestImportRefusesTamperedBundle(t *testing.T) {
	db := filepath.Join(t.TempDir(), "models.db")
	good := writeTestBundle(t, "1", bytes.Repeat([]byte("weights-1 "), 50000))
	if code, out, errOut := cli(t, "models", "--store", db, "import", good); code != 0 {
		t.Fatalf("import good: %d %s %s", code, out, errOut)
	}
	_, before, _ := cli(t, "models", "--store", db, "ls")

	bad := writeTestBundle(t, "2", bytes.Repeat([]byte("weights-2 "), 50000))
	p := filepath.Join(bad, "model.onnx")
	b, _ := os.ReadFile(p)
	b[4096] ^= 0xff
	os.WriteFile(p, b, 0o644)
	code, _, errOut := cli(t, "models", "--store", db, "import", bad)
	if code == 0 || !strings.Contains(errOut, "model.onnx has sha256") || !strings.Contains(errOut, "edgeinfer.json says") {
		t.Fatalf("tampered import: exit %d, %q", code, errOut)
	}
	if _, after, _ := cli(t, "models", "--store", db, "ls"); after != before || strings.Contains(after, "tiny@2") {
		t.Fatalf("ls changed after a refused import:\n%s\n%s", before, after)
	}
	if code, out, _ := cli(t, "models", "--store", db, "verify"); code != 0 || !strings.Contains(out, "ok: 1 versions") {
		t.Fatalf("verify after a refused import: %d %s", code, out)
	}
}

// Commands that only read a store refuse a path that is not one, and
// create nothing there.
func TestReadOnlyCommandsDoNotCreateStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "typo")
	db := filepath.Join(dir, "models.db")
	want := "store " + db + " does not exist (create it with `edgeinfer models --store " + db + " import DIR`)"
	for _, args := range [][]string{
		{"models", "--store", db, "ls"},
		{"models", "--store", db, "verify"},
		{"models", "--store", db, "export", "tiny", t.TempDir()},
		{"models", "--store", db, "activate", "tiny@1"},
		{"models", "--store", db, "rollback", "tiny"},
		{"models", "--store", db, "rm", "tiny@1"},
		{"models", "--store", db, "gc"},
		{"models", "--store", db, "import", filepath.Join(dir, "no-bundle")},
		{"generate", "--store", db, "--model", "tiny", "--prompt", "hi"},
		{"perplexity", "--store", db, "--model", "tiny", "--text", "x.txt"},
		{"bench", "--store", db, "--model", "tiny", "--profile", "demo"},
	} {
		code, _, errOut := cli(t, args...)
		if code == 0 {
			t.Errorf("%v: exit 0", args)
		}
		if args[len(args)-2] != "import" && !strings.Contains(errOut, want) {
			t.Errorf("%v: %q does not say %q", args, errOut, want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%v created %s", args, dir)
		}
	}
}

func TestMissingPathsAreNamed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	db := filepath.Join(t.TempDir(), "models.db")
	for _, args := range [][]string{
		{"run", missing},
		{"inspect", missing},
		{"models", "--store", db, "import", missing},
		{"generate", "--model", missing, "--prompt", "hi"},
		{"perplexity", "--model", missing, "--text", "x"},
		{"bench", "--model", missing, "--profile", "demo"},
		{"tokenize", "--tokenizer", missing},
		{"model", "import", "--hf", missing, "--out", t.TempDir()},
	} {
		code, _, errOut := cli(t, args...)
		if code == 0 || !strings.Contains(errOut, "no such file or directory: "+missing) {
			t.Errorf("%v: exit %d, %q", args, code, errOut)
		}
	}
	if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("import of a missing directory created the store")
	}
}

func TestRunRefusesDecoder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if code, _, errOut := cli(t, "model", "build", "--preset", "tiny-test", "--out", dir); code != 0 {
		t.Fatal(errOut)
	}
	const want = "this is a decoder: use `edgeinfer generate"
	for _, arg := range []string{dir, filepath.Join(dir, "model.onnx")} {
		if code, _, errOut := cli(t, "run", arg); code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("run %s: exit %d, %q", arg, code, errOut)
		}
	}
	// Without its manifest the graph itself says what it is.
	orttest.Need(t)
	bare := t.TempDir()
	for _, f := range []string{"model.onnx", "model.onnx.data"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(bare, f), b, 0o644)
	}
	if code, _, errOut := cli(t, "run", filepath.Join(bare, "model.onnx"), "--threads", "1"); code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("run bare decoder graph: exit %d, %q", code, errOut)
	}
}

func TestRunRefusesUnknownInputAndDim(t *testing.T) {
	if _, err := os.Stat(testAdd); err != nil {
		t.Skip("libonnx-testdata not installed (.ci/run installs it)")
	}
	orttest.Need(t)
	model := testAdd + "/model.onnx"
	data := testAdd + "/test_data_set_0/input_0.pb"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--input", "z=" + data}, `the model has no input "z"; its inputs are x: float32[3,4,5], y: float32[3,4,5]`},
		{[]string{"--dim", "batch=2"}, `no input has a dimension "batch"`},
		{[]string{"--input", data, "--input", data, "--input", data}, "name it NAME=FILE"},
	} {
		args := append([]string{"run", model, "--runs", "1", "--threads", "1"}, tc.args...)
		code, out, errOut := cli(t, args...)
		if code == 0 || !strings.Contains(errOut, tc.want) || strings.Contains(out, "latency") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want an error saying %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

// Every command's -h is help on stdout (exit 0) naming its arguments.
func TestHelpOnStdout(t *testing.T) {
	want := map[string]string{
		"run":     "edgeinfer run [flags] MODEL.onnx",
		"inspect": "edgeinfer inspect [--ops] MODEL.onnx",
		"models":  "edgeinfer models [--store S] import DIR",
		"model":   "edgeinfer model build --preset NAME",
		"version": "edgeinfer version",
	}
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		code, out, errOut := cli(t, n, "-h")
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage:") {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", n, code, out, errOut)
		}
		if w, ok := want[n]; ok && !strings.Contains(out, w) {
			t.Errorf("%s -h does not show %q:\n%s", n, w, out)
		}
	}
	if code, out, _ := cli(t, "models", "--store", "x.db", "import", "-h"); code != 0 || !strings.Contains(out, "import DIR") {
		t.Errorf("models import -h: %d %q", code, out)
	}
	if code, out, _ := cli(t, "--help"); code != 0 || !strings.Contains(out, "commands:") {
		t.Errorf("--help: %d %q", code, out)
	}
	// A bad flag is an error on stderr, exit 2.
	if code, out, errOut := cli(t, "run", "--frobnicate"); code != 2 || out != "" || !strings.Contains(errOut, "frobnicate") {
		t.Errorf("bad flag: %d %q %q", code, out, errOut)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, errOut := cli(t, args...)
		if code != 0 || errOut != "" {
			t.Fatalf("%v: %d %q", args, code, errOut)
		}
		for _, w := range []string{"edgeinfer ", "\ncommit: ", "\nonnx runtime: "} {
			if !strings.Contains(out, w) {
				t.Errorf("%v output lacks %q:\n%s", args, w, out)
			}
		}
	}
	t.Setenv("ONNXRUNTIME_LIB", filepath.Join(t.TempDir(), "libonnxruntime.so.1"))
	if _, out, _ := cli(t, "--version"); !strings.Contains(out, "onnx runtime: not found: ") || !strings.Contains(out, "ONNXRUNTIME_LIB") {
		t.Errorf("version without a library:\n%s", out)
	}
}

func TestBuildVersion(t *testing.T) {
	tests := []struct {
		bi          *debug.BuildInfo
		sdk, commit string
	}{
		{nil, "unknown", "unknown"},
		{&debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "(devel)", "unknown"},
		{&debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.3.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}, "v0.3.0", "abc123 (modified)"},
		{&debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "v1.0.0"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.2.1"}}}, "v0.2.1", "unknown"},
	}
	for _, tc := range tests {
		if sdk, commit := buildVersion(tc.bi); sdk != tc.sdk || commit != tc.commit {
			t.Errorf("buildVersion(%+v) = %q, %q; want %q, %q", tc.bi, sdk, commit, tc.sdk, tc.commit)
		}
	}
}

func TestCheckDims(t *testing.T) {
	inputs := []ort.ValueInfo{
		{Name: "images", Kind: "tensor", DType: ort.Float32, Shape: []int64{-1, 3, -1, -1}, DimNames: []string{"batch", "", "height", "width"}},
		{Name: "scale", Kind: "tensor", DType: ort.Float32, Shape: []int64{1}},
	}
	if err := checkDims(inputs, map[string]int64{"batch": 2, "height": 480}); err != nil {
		t.Fatal(err)
	}
	err := checkDims(inputs, map[string]int64{"seq": 8})
	if err == nil || !strings.Contains(err.Error(), `no input has a dimension "seq"; symbolic dimensions: batch, height, width; inputs: images: float32[batch,3,height,width], scale: float32[1]`) {
		t.Fatalf("unknown dim: %v", err)
	}
	for _, tc := range []struct {
		info ort.ModelInfo
		want bool
	}{
		{ort.ModelInfo{Inputs: inputs}, false},
		{ort.ModelInfo{Metadata: map[string]string{"edgeinfer.contract": "paged"}}, true},
		{ort.ModelInfo{Inputs: []ort.ValueInfo{{Name: "input_ids"}, {Name: "past_key_values.0.key"}}}, true},
		{ort.ModelInfo{Inputs: []ort.ValueInfo{{Name: "input_ids"}, {Name: "block_tables"}}}, true},
	} {
		if got := isDecoder(tc.info); got != tc.want {
			t.Errorf("isDecoder(%+v) = %v", tc.info, got)
		}
	}
}

// run takes a one-shot bundle directory too: its manifest names the model.
func TestRunOneShotBundleDir(t *testing.T) {
	if _, err := os.Stat(testAdd); err != nil {
		t.Skip("libonnx-testdata not installed (.ci/run installs it)")
	}
	orttest.Need(t)
	b, err := os.ReadFile(testAdd + "/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	dir := writeTestBundle(t, "1", b)
	code, out, errOut := cli(t, "run", dir, "--runs", "1", "--threads", "1")
	if code != 0 || !strings.Contains(out, "model: "+filepath.Join(dir, "model.onnx")) || !strings.Contains(out, "output sum: float32[3 4 5]") {
		t.Fatalf("run DIR: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := cli(t, "run", t.TempDir()); code == 0 || !strings.Contains(errOut, "without edgeinfer.json") {
		t.Fatalf("run on a plain directory: exit %d %q", code, errOut)
	}
}

// mustRun runs the CLI in-process and fails the test unless it exits 0
// with want in its output; it returns the output.
func mustRun(t *testing.T, ctx context.Context, want string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runMain(ctx, &stdout, &stderr, args)
	out := stdout.String() + stderr.String()
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("edgeinfer %s: exit %d, want %q in:\n%s", strings.Join(args, " "), code, want, out)
	}
	return out
}
