package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/plugintest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

// TestGeneratePlugins: a decoder bundle's plugins run around Generate: the
// model is prompted with the pre plugin's redacted prompt, the post
// plugin's result over the whole output comes with the stream (the pre
// plugin's outputs passed through), and the record times both apart.
func TestGeneratePlugins(t *testing.T) {
	orttest.Need(t)
	dir := plugintest.TextBundle(t, "../../examples/tinylm", "tiny-text")
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
		recs := sink.wait(t, n)
		if len(recs) != n {
			t.Fatalf("%d records, want %d", len(recs), n)
		}
		return recs
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
	// A constrained generation goes through the plugins too: the post
	// plugin extracts the JSON object the constraint made the whole output.
	st = e.Generate(ctx, "tiny-text", prompt, engine.GenerateOptions{MaxTokens: 60, Sampling: &engine.Sampling{Temperature: 1, Seed: 2}, Constraint: engine.JSON()})
	text.Reset()
	for tok, err := range st.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(tok.Text)
	}
	if res, err = st.Result(); err != nil {
		t.Fatal(err)
	}
	if doc, _ := get("json").Text(); doc != text.String() || !strings.HasPrefix(doc, "{") {
		t.Errorf("constrained output %q, the post plugin's JSON %q", text.String(), doc)
	}
}
