package engine_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/plugintest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

// textBundle imports examples/tinylm and ships it with the redact (pre)
// and jsonout (post) plugins, as an OTA release would.
func textBundle(t *testing.T) string {
	t.Helper()
	orttest.Need(t)
	dir := t.TempDir()
	if _, err := build.ImportHF(context.Background(), "../../examples/tinylm", dir, build.ImportOptions{Name: "tiny-text"}); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, plugintest.Build(t, "runtime/plugin/plugins/redact"), dir+"/pre.wasm")
	copyFile(t, plugintest.Build(t, "runtime/plugin/plugins/jsonout"), dir+"/post.wasm")
	m := b.Manifest
	var files []string
	for _, f := range m.Files {
		files = append(files, f.Path)
	}
	files = append(files, "pre.wasm", "post.wasm")
	if err := bundle.Write(dir, &m, files...); err != nil {
		t.Fatal(err)
	}
	sum := map[string]string{}
	for _, f := range m.Files {
		sum[f.Path] = f.SHA256
	}
	m.Plugins = &bundle.Plugins{Pre: &bundle.PluginRef{File: "pre.wasm", SHA256: sum["pre.wasm"], TimeoutMS: 60000},
		Post: &bundle.PluginRef{File: "post.wasm", SHA256: sum["post.wasm"], TimeoutMS: 60000}}
	if err := bundle.Write(dir, &m, files...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGeneratePlugins: a decoder bundle's plugins run around Generate: the
// model is prompted with the pre plugin's redacted prompt, the post
// plugin's result over the whole output comes with the stream (the pre
// plugin's outputs passed through), and the record times both apart.
func TestGeneratePlugins(t *testing.T) {
	dir := textBundle(t)
	sink := &recordSink{}
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Models: []engine.ModelSpec{{Dir: dir}}, Observers: []engine.Observer{sink}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	prompt := "Write to ishmael@pequod.example about the whale"
	st := e.Generate(ctx, "tiny-text", prompt, engine.GenerateOptions{MaxTokens: 12, Sampling: &engine.Sampling{}})
	var text strings.Builder
	for tok, err := range st.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(tok.Text)
	}
	res, err := st.Result()
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) abi.Tensor {
		x, ok := abi.Find(res, name)
		if !ok {
			t.Fatalf("no %q in the result %v", name, res)
		}
		return x
	}
	doc, _ := get("json").Text()
	found, _ := get("found").Int64s()
	red, _ := get("redacted").Int64s()
	if want, ok := prepost.ExtractJSON(text.String()); doc != want || (found[0] == 1) != ok || red[0] != 1 {
		t.Errorf("result json %q found %v redacted %v; native %q %v", doc, found, red, want, ok)
	}
	// the model saw the redacted prompt
	redacted, _ := prepost.Redact(prompt)
	ids := e.Tokenizer("tiny-text").Encode(redacted)
	if sum := st.Summary(); sum.PromptTokens < len(ids) || sum.PromptTokens > len(ids)+2 {
		t.Errorf("prompt tokens %d, the redacted prompt has %d (+ specials)", sum.PromptTokens, len(ids))
	}
	wantRecords := func(n int) []engine.Record {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			sink.mu.Lock()
			recs := slices.Clone(sink.recs)
			sink.mu.Unlock()
			if len(recs) >= n || time.Now().After(end) {
				if len(recs) != n {
					t.Fatalf("%d records, want %d", len(recs), n)
				}
				return recs
			}
		}
	}
	if r := wantRecords(1)[0]; r.Pre <= 0 || r.Post <= 0 {
		t.Errorf("record pre %v post %v, want both timed", r.Pre, r.Post)
	}

	// Token ids cannot go through a pre plugin on text.
	_, err = e.GenerateTokens(ctx, "tiny-text", []int32{1, 2, 3}, engine.GenerateOptions{MaxTokens: 2}).Result()
	if !errors.Is(err, engine.ErrInvalidRequest) {
		t.Errorf("GenerateTokens through a pre plugin: %v", err)
	}
	// A caller that stops reading gets no result, and the record still
	// reaches the observers.
	st = e.Generate(ctx, "tiny-text", prompt, engine.GenerateOptions{MaxTokens: 12})
	for range st.Tokens() {
		break
	}
	if _, err := st.Result(); err == nil {
		t.Error("a result for a generation left early")
	}
	if recs := wantRecords(2); recs[1].Post != 0 || recs[1].Pre <= 0 {
		t.Errorf("early-left record pre %v post %v", recs[1].Pre, recs[1].Post)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
