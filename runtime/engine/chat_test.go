package engine

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// chatTemplate marks turns with the tiny model's one special token, and
// refuses tool turns, so every part of Chat runs on examples/tinylm.
const chatTemplate = "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}" +
	"{{ m.role }}: {{ m.content }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"

// tinyText imports examples/tinylm twice per test binary: as it is (no
// chat template) and with chatTemplate.
var tinyText = sync.OnceValues(func() ([2]string, error) {
	var dirs [2]string
	ctx := context.Background()
	for i, name := range []string{"tinylm", "tinychat"} {
		dir, err := os.MkdirTemp("", "engine-"+name+"-")
		if err != nil {
			return dirs, err
		}
		textDirs = append(textDirs, dir)
		if _, err := build.ImportHF(ctx, "../../examples/tinylm", dir, build.ImportOptions{Name: name}); err != nil {
			return dirs, err
		}
		dirs[i] = dir
	}
	b, err := bundle.Load(dirs[1])
	if err != nil {
		return dirs, err
	}
	m := b.Manifest
	m.Chat = &bundle.Chat{Template: chatTemplate, EOSToken: "<|endoftext|>"}
	var files []string
	for _, f := range m.Files {
		files = append(files, f.Path)
	}
	return dirs, bundle.Write(dirs[1], &m, files...)
})

// textDirs are tinyText's directories, removed when the tests end.
var textDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range textDirs {
		os.RemoveAll(d)
	}
	if tinyPath != "" {
		os.RemoveAll(tinyPath)
	}
	os.Exit(code)
}

func openText(t *testing.T) *Engine {
	t.Helper()
	orttest.Need(t)
	dirs, err := tinyText()
	if err != nil {
		t.Fatal(err)
	}
	return openModels(t, dirs[0], dirs[1])
}

// openModels opens an engine on the bundles (one intra-op thread), closed
// when the test ends.
func openModels(t *testing.T, dirs ...string) *Engine {
	t.Helper()
	var cfg Config
	for _, d := range dirs {
		cfg.Models = append(cfg.Models, ModelSpec{Dir: d})
	}
	cfg.Session.IntraOpThreads = 1
	e, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// drain runs s to its end and returns its text and summary.
func drain(s *Stream) (string, Summary, error) {
	var text strings.Builder
	var err error
	for tok, e := range s.Tokens() {
		if e != nil {
			err = e
			break
		}
		text.WriteString(tok.Text)
	}
	return text.String(), s.Summary(), err
}

// The engine owns a model's text: ModelInfo tells what the HTTP API needs
// (template, turn end, context, tokenizer), Chat renders and encodes the
// conversation once, with the version that serves it, and stops at the
// turn end, which never shows.
func TestChat(t *testing.T) {
	e := openText(t)
	ctx := context.Background()
	infos := map[string]ModelInfo{}
	for _, m := range e.Models() {
		infos[m.Name] = m
	}
	if m := infos["tinychat"]; !m.ChatTemplate || m.TurnEnd != "<|endoftext|>" || m.Context != 256 || !m.Tokenizer || m.Loaded.IsZero() {
		t.Fatalf("tinychat: %+v", m)
	}
	if m := infos["tinylm"]; m.ChatTemplate || m.TurnEnd != "" || m.Context != 256 || !m.Tokenizer {
		t.Fatalf("tinylm: %+v", m)
	}

	msgs := []ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Call me Ishmael"}}
	rendered := "system: Be brief.<|endoftext|>\nuser: Call me Ishmael<|endoftext|>\nassistant:"
	want := len(e.Tokenizer("tinychat").EncodeWith(rendered, tokenizer.EncodeOptions{SplitSpecialTokens: true}))
	text, sum, err := drain(e.Chat(ctx, "tinychat", msgs, GenerateOptions{MaxTokens: 40}))
	if err != nil || sum.PromptTokens != want || strings.Contains(text, "<|endoftext|>") {
		t.Fatalf("tinychat: %v, %d prompt tokens (want %d, the rendered template's), text %q", err, sum.PromptTokens, want, text)
	}
	// Without a template the turns are paragraphs of plain text.
	_, sum, err = drain(e.Chat(ctx, "tinylm", msgs, GenerateOptions{MaxTokens: 1}))
	_, plain, _ := drain(e.Generate(ctx, "tinylm", "Be brief.\n\nCall me Ishmael", GenerateOptions{MaxTokens: 1}))
	if err != nil || sum.PromptTokens != plain.PromptTokens {
		t.Fatalf("tinylm: %v, %d prompt tokens, the paragraphs have %d", err, sum.PromptTokens, plain.PromptTokens)
	}
	// A template that refuses the conversation says so.
	_, sum, err = drain(e.Chat(ctx, "tinychat", []ChatMessage{{Role: "tool", Content: "{}"}}, GenerateOptions{}))
	if !errors.Is(err, ErrChatTemplate) || !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "no tools here") || sum.Finish != FinishRejected {
		t.Fatalf("refused conversation: %v, %+v", err, sum)
	}
	// A swap brings the new version's template.
	dirs, _ := tinyText()
	if _, err := e.Swap(ctx, "tinylm", ModelSpec{Dir: dirs[1]}, nil); err != nil {
		t.Fatal(err)
	}
	if _, sum, err = drain(e.Chat(ctx, "tinylm", msgs, GenerateOptions{MaxTokens: 1})); err != nil || sum.PromptTokens != want {
		t.Fatalf("swapped tinylm: %v, %d prompt tokens, want %d", err, sum.PromptTokens, want)
	}
}

// Prompts refused for their length say so with the counts, before they
// run; FitContext with no MaxTokens generates up to the context.
func TestPromptLimits(t *testing.T) {
	e := openText(t)
	ctx := context.Background()
	long := strings.Repeat("whale ", 300)
	for _, tt := range []struct {
		name   string
		s      *Stream
		sentry error
		want   PromptError
	}{
		{"empty", e.Generate(ctx, "tinylm", "", GenerateOptions{}), ErrInvalidRequest, PromptError{Model: "tinylm"}},
		{"over the limit", e.Generate(ctx, "tinylm", "Call me Ishmael", GenerateOptions{MaxPromptTokens: 2}), ErrPromptTooLong,
			PromptError{Model: "tinylm", Tokens: 7, Limit: 2}},
		{"past the context", e.Generate(ctx, "tinylm", "Call me Ishmael", GenerateOptions{MaxTokens: 300, FitContext: true}), ErrPromptTooLong,
			PromptError{Model: "tinylm", Tokens: 7, Context: 256, MaxTokens: 300}},
		{"no room", e.GenerateTokens(ctx, "tinylm", make([]int32, 256), GenerateOptions{FitContext: true}), ErrPromptTooLong,
			PromptError{Model: "tinylm", Tokens: 256, Context: 256}},
	} {
		_, sum, err := drain(tt.s)
		pe, ok := errors.AsType[*PromptError](err)
		if !ok || *pe != tt.want || !errors.Is(err, tt.sentry) || sum.Finish != FinishRejected {
			t.Errorf("%s: %v (%+v), want %+v", tt.name, err, pe, tt.want)
		}
	}
	if _, _, err := drain(e.Generate(ctx, "tinylm", long, GenerateOptions{})); !errors.Is(err, ErrPromptTooLong) {
		t.Errorf("a prompt past the context without FitContext: %v", err)
	}
	if _, _, err := drain(e.GenerateTokens(ctx, "tinylm", []int32{1, 1 << 20}, GenerateOptions{})); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "prompt[1]") {
		t.Errorf("a token id outside the vocabulary: %v", err)
	}
	_, sum, err := drain(e.GenerateTokens(ctx, "tinylm", make([]int32, 240), GenerateOptions{FitContext: true, Sampling: &Sampling{}}))
	if err != nil || (sum.Finish != FinishLength && sum.Finish != FinishStop) || sum.Finish == FinishLength && sum.PromptTokens+sum.OutputTokens != 256 {
		t.Errorf("FitContext without MaxTokens: %v, %+v", err, sum)
	}
}
