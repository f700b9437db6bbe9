package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// A decoder exported with Optimum's names (here: the tiny Llama trained in
// examples/tinylm, written in the compatible contract and stripped to what an
// export directory holds) is recognised by its I/O names, bundled as it is,
// and generates exactly what the native paged bundle of the same weights
// generates.
func TestExportedDecoderRunsLikePaged(t *testing.T) {
	orttest.Need(t)
	const hf = "../../examples/tinylm"
	ctx := context.Background()
	paged, err := build.ImportHF(ctx, hf, t.TempDir(), build.ImportOptions{Name: "paged"})
	if err != nil {
		t.Fatal(err)
	}
	compat, err := build.ImportHF(ctx, hf, t.TempDir(), build.ImportOptions{Name: "x", Options: llama.Options{Contract: llama.ContractCompatible}})
	if err != nil {
		t.Fatal(err)
	}
	export := t.TempDir()
	for _, f := range compat.Manifest.Files {
		copyTo(t, compat.Path(f.Path), filepath.Join(export, f.Path))
	}
	copyTo(t, filepath.Join(hf, "config.json"), filepath.Join(export, "config.json"))
	b, err := build.ImportExported(ctx, export, t.TempDir(), "exported", "")
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest.Contract != bundle.ContractCompatible || b.Manifest.Tokenizer == "" {
		t.Fatalf("recognised as %+v", b.Manifest)
	}
	e, err := Open(ctx, Config{Models: []ModelSpec{{Dir: paged.Dir}, {Dir: b.Dir}}, Session: ort.Options{IntraOpThreads: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	text := func(model string) string {
		var s string
		for tok, err := range e.Generate(ctx, model, "Call me Ishmael", GenerateOptions{MaxTokens: 24, Sampling: &Sampling{}}).Tokens() { // greedy: the bundle samples by default
			if err != nil {
				t.Fatal(err)
			}
			s += tok.Text
		}
		return s
	}
	a, c := text("paged"), text("exported")
	if a != c || a == "" {
		t.Fatalf("paged %q, exported %q", a, c)
	}
}

func copyTo(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
