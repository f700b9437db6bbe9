package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/internal/grammar/grammartest"
)

// TestToolCallsInTheModelsFormat: a model whose chat template teaches a
// tool-call format writes its calls in that format: Qwen3's template (the
// real tokenizer_config.json, with the Qwen3 vocabulary) has the model
// write <tool_call> tags, one after another for parallel calls;
// Llama-3.1's (with the Llama-3 vocabulary) one {"name", "parameters"}
// object. Random weights propose arbitrary tokens, so every call that
// comes back parsed and valid was held to the format by the constraint.
// Each answer is also sent back as the conversation's history with a tool
// result, which the template renders.
func TestToolCallsInTheModelsFormat(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds two models with 128k+ vocabularies")
	}
	llama31, err := os.ReadFile(filepath.Join("..", "tokenizer", "testdata", "chat", "llama3_1_tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	var l31 struct {
		Template string `json:"chat_template"`
		BOS      string `json:"bos_token"`
		EOS      string `json:"eos_token"`
	}
	if err := json.Unmarshal(llama31, &l31); err != nil {
		t.Fatal(err)
	}
	type vocab struct {
		name, format string
		size         int
		bos          int64
		eos          []int64
		chat         *bundle.Chat // nil: the tokenizer's own template
	}
	var specs []engine.ModelSpec
	vocabs := []vocab{
		{"qwen3", "qwen", 151936, 151643, []int64{151645, 151643}, nil},
		{"llama3", "llama3.1", 128256, 128000, []int64{128001, 128009}, &bundle.Chat{Template: l31.Template, BOSToken: l31.BOS, EOSToken: l31.EOS}},
	}
	for _, v := range vocabs {
		dir := filepath.Join(tokenizersDir(), v.name)
		if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
			t.Skipf("the %s tokenizer is not in %s (platforms/tokenizers/fetch.sh, part of make setup)", v.name, dir)
		}
		chat := v.chat
		if chat == nil {
			var c struct {
				Template string `json:"chat_template"`
				EOS      string `json:"eos_token"`
			}
			data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
			if err != nil || json.Unmarshal(data, &c) != nil {
				t.Fatalf("%s: tokenizer_config.json: %v", v.name, err)
			}
			chat = &bundle.Chat{Template: c.Template, EOSToken: c.EOS}
		}
		cfg, src, err := llama.Preset("tiny-test")
		if err != nil {
			t.Fatal(err)
		}
		cfg.VocabSize, cfg.MaxPositionEmbeddings = v.size, 2048
		cfg.BOSTokenID, cfg.EOSTokenID = llama.TokenIDs{v.bos}, llama.TokenIDs(v.eos)
		out := t.TempDir()
		if _, err := build.BuildDecoder(context.Background(), out, build.DecoderSpec{Name: v.name, Version: "1", Config: cfg, Weights: src,
			Tokenizer: filepath.Join(dir, "tokenizer.json"), Chat: chat}); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, engine.ModelSpec{Dir: out})
	}
	f := openFixtureWith(t, Config{}, func(c *engine.Config) {
		c.Models = specs
		c.KV.BudgetBytes = 64 << 20
	})
	for _, v := range vocabs {
		t.Run(v.name, func(t *testing.T) {
			var info engine.ModelInfo
			for _, m := range f.eng.Models() {
				if m.Name == v.name {
					info = m
				}
			}
			if info.ToolFormat.Name != v.format {
				t.Fatalf("the template's tool format is %q, want %q", info.ToolFormat.Name, v.format)
			}
			// how each format's calls begin
			wrote := map[string]string{"qwen": "<tool_call>\n{\"name\":", "llama3.1": "{\"name\":"}
			key := map[string]string{"qwen": `","arguments":{`, "llama3.1": `","parameters":{`}
			const n = 24
			calls, multi := 0, 0
			for i := range n {
				stream := i%2 == 1
				parallel := i%3 != 2
				body := fmt.Sprintf(`{"model":%q,"max_tokens":160,"temperature":1,"seed":%d,"stream":%v,"messages":[{"role":"user","content":"Task %d"}],"tools":%s,"tool_choice":"required","parallel_tool_calls":%v,"logprobs":true}`,
					v.name, i, stream, i, toolsJSON("get_weather", "lot_status"), parallel)
				resp, data := f.post(t, "/v1/chat/completions", body)
				if resp.StatusCode != 200 {
					t.Fatalf("%d: %s", resp.StatusCode, data)
				}
				a := readAnswer(t, stream, data)
				if a.finish != "tool_calls" || len(a.calls) == 0 {
					t.Fatalf("answer %d (stream %v): finish %q, %d calls: %s", i, stream, a.finish, len(a.calls), data)
				}
				if !stream {
					// what the model wrote, from its tokens' log-probabilities
					var raw struct {
						Choices []struct {
							Logprobs struct {
								Content []struct {
									Token string `json:"token"`
								} `json:"content"`
							} `json:"logprobs"`
						} `json:"choices"`
					}
					if err := json.Unmarshal(data, &raw); err != nil || len(raw.Choices) != 1 {
						t.Fatalf("answer %d: %v %s", i, err, data)
					}
					var text strings.Builder
					for _, tok := range raw.Choices[0].Logprobs.Content {
						text.WriteString(tok.Token)
					}
					if w, k := wrote[v.format], key[v.format]; !strings.HasPrefix(text.String(), w) || !strings.Contains(text.String(), k) {
						t.Errorf("answer %d: the model wrote %q, want it to begin %q and name the arguments %q (the template's format)", i, text.String(), w, k)
					}
				}
				if len(a.calls) > 1 {
					multi++
					if !parallel || v.format == "llama3.1" {
						t.Errorf("answer %d: %d calls where one is allowed", i, len(a.calls))
					}
				}
				var history []string
				for _, c := range a.calls {
					calls++
					if err := grammartest.Validate([]byte(testTools[c.Function.Name]), []byte(c.Function.Arguments)); err != nil {
						t.Errorf("answer %d: %s(%s): %v", i, c.Function.Name, c.Function.Arguments, err)
					}
					call, _ := json.Marshal(c)
					history = append(history, string(call))
				}
				// the calls and a result back through the template
				result := fmt.Sprintf(`{"role":"tool","tool_call_id":%q,"content":"{\"ok\":true}"}`, a.calls[0].ID)
				body = fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"Task %d"},{"role":"assistant","content":null,"tool_calls":[%s]},%s],"tools":%s}`,
					v.name, i, strings.Join(history[:min(len(history), 1+map[bool]int{true: 0, false: 8}[v.format == "llama3.1"])], ","), result, toolsJSON("get_weather", "lot_status"))
				if resp, data := f.post(t, "/v1/chat/completions", body); resp.StatusCode != 200 {
					t.Fatalf("answer %d sent back: %d %s", i, resp.StatusCode, data)
				}
			}
			t.Logf("%s (%s format): %d answers, %d calls, all valid; %d answers with parallel calls", v.name, v.format, n, calls, multi)
		})
	}
}

// tokenizersDir is where platforms/tokenizers/fetch.sh puts the real
// vocabularies.
func tokenizersDir() string {
	if d := os.Getenv("EDGEINFER_TOKENIZERS"); d != "" {
		return d
	}
	cache, _ := os.UserCacheDir()
	return filepath.Join(cache, "edgeinfer", "tokenizers")
}
