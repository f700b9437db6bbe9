package llm

import (
	"context"
	"encoding/json"
	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// golden is examples/tinylm/golden.json: the torch training code's own
// logits and held-out perplexity, an implementation independent of ours.
type golden struct {
	Prompts []struct {
		Text       string    `json:"text"`
		IDs        []int32   `json:"ids"`
		LastLogits []float64 `json:"last_logits"`
		Greedy32   []int32   `json:"greedy_32"`
	} `json:"prompts"`
	Perplexity struct {
		TextFile   string  `json:"text_file"`
		Window     int     `json:"window"`
		Perplexity float64 `json:"perplexity"`
	} `json:"perplexity"`
}

const tinylmDir = "../../../examples/tinylm"

// The tiny Llama trained here, imported from its Hugging Face checkpoint
// and run through ONNX Runtime, matches the torch model: last-position
// logits within 1e-3, the same 32 greedy tokens, and the same held-out
// perplexity within 1 %.
func TestTinyLMMatchesTorch(t *testing.T) {
	orttest.Need(t)
	raw, err := os.ReadFile(filepath.Join(tinylmDir, "golden.json"))
	if err != nil {
		t.Fatalf("golden file: %v", err)
	}
	var g golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	b, err := build.ImportHF(context.Background(), tinylmDir, t.TempDir(), build.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(context.Background(), b, Options{Session: ort.Options{IntraOpThreads: 2}, KV: kvcache.Options{DisablePrefixCache: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	for i, p := range g.Prompts {
		id := sched.SeqID(i + 1)
		if _, err := m.Admit(ctx, sched.Sequence{ID: id, Tokens: p.IDs, PromptLen: len(p.IDs)}); err != nil {
			t.Fatal(err)
		}
		var res sched.StepResult
		if err := m.prefill(ctx, &sched.PrefillChunk{Seq: id, Tokens: p.IDs, Last: false}, &res); err != nil {
			t.Fatal(err)
		}
		var worst float64
		for j, l := range m.Logits(0) {
			worst = math.Max(worst, math.Abs(float64(l)-p.LastLogits[j]))
		}
		m.Release(id)
		t.Logf("%q: max |logit − torch| = %.2e", p.Text, worst)
		if worst > 1e-3 {
			t.Errorf("%q: logits differ from torch by %.3g (> 1e-3)", p.Text, worst)
		}
		got := collect(t, m, p.IDs, GenerateOptions{MaxTokens: len(p.Greedy32)})
		for j := range p.Greedy32 {
			if j >= len(got) || got[j] != p.Greedy32[j] {
				t.Fatalf("%q: greedy tokens %v, torch %v", p.Text, got, p.Greedy32)
			}
		}
	}
	if testing.Short() {
		return
	}
	tok, err := tokenizer.Load(filepath.Join(tinylmDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(tinylmDir, g.Perplexity.TextFile))
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(string(text))
	var nll float64
	var n int
	for off := 0; off+1 < len(ids); off += g.Perplexity.Window {
		win := make([]int32, 0, g.Perplexity.Window)
		for _, id := range ids[off:min(off+g.Perplexity.Window, len(ids))] {
			win = append(win, int32(id))
		}
		s, k, err := m.Score(ctx, win)
		if err != nil {
			t.Fatal(err)
		}
		nll, n = nll+s, n+k
	}
	ppl := math.Exp(nll / float64(n))
	t.Logf("held-out perplexity %.4f over %d tokens; torch %.4f", ppl, n, g.Perplexity.Perplexity)
	if rel := math.Abs(ppl/g.Perplexity.Perplexity - 1); rel > 0.01 {
		t.Errorf("perplexity %.4f vs torch %.4f: %.2f%% apart (> 1%%)", ppl, g.Perplexity.Perplexity, 100*rel)
	}
}
