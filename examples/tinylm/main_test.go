package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// golden mirrors golden.json, written by train.py from the torch model.
type golden struct {
	Prompts []struct {
		Text       string      `json:"text"`
		IDs        []int       `json:"ids"`
		LastLogits []float32   `json:"last_logits"`
		AllLogits  [][]float32 `json:"all_logits"`
		Greedy32   []int       `json:"greedy_32"`
	} `json:"prompts"`
	Perplexity struct {
		TextFile   string  `json:"text_file"`
		Window     int     `json:"window"`
		NumTokens  int     `json:"num_tokens"`
		Predicted  int     `json:"predicted_tokens"`
		MeanNLL    float64 `json:"mean_nll"`
		Perplexity float64 `json:"perplexity"`
	} `json:"perplexity"`
}

func loadGolden(t *testing.T) golden {
	t.Helper()
	raw, err := os.ReadFile("golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestLoadMatchesConfig(t *testing.T) {
	m, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := m.Config
	want := 0
	for _, s := range c.shapes() {
		n := 1
		for _, d := range s {
			n *= d
		}
		want += n
	}
	if m.Params != want || len(m.file.Names()) != 2+1+9*c.NumHiddenLayers {
		t.Errorf("%d params in %d tensors, config implies %d", m.Params, len(m.file.Names()), want)
	}
	if c.VocabSize != 2048 || c.HiddenSize != 256 || c.NumKeyValueHeads != 2 || c.HeadDim != 64 {
		t.Errorf("config %+v", c)
	}
}

func TestLoadRejectsMismatch(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := os.ReadFile("config.json")
	os.WriteFile(dir+"/config.json", bytes.Replace(cfg, []byte(`"intermediate_size": 768`), []byte(`"intermediate_size": 512`), 1), 0o644)
	st, _ := os.ReadFile("model.safetensors")
	os.WriteFile(dir+"/model.safetensors", st, 0o644)
	_, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), "mlp.") {
		t.Errorf("err = %v, want a shape mismatch naming an mlp tensor", err)
	}
}

// TestGoldenLogits compares the Go reference forward with the torch model's
// logits recorded by train.py.
func TestGoldenLogits(t *testing.T) {
	m, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tk, err := tokenizer.Load("tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	g := loadGolden(t)
	for i, p := range g.Prompts {
		if got := tk.Encode(p.Text); !slices.Equal(got, p.IDs) {
			t.Errorf("Encode(%q) = %v, golden %v", p.Text, got, p.IDs)
		}
		logits := m.Forward(p.IDs)
		d := maxDiff(logits[len(logits)-1], p.LastLogits)
		if d > 1e-3 {
			t.Errorf("prompt %d: last logits differ by %g", i, d)
		}
		t.Logf("prompt %d (%d tokens): last-position logits within %.2g of torch", i, len(p.IDs), d)
		for pos, row := range p.AllLogits {
			if d := maxDiff(logits[pos], row); d > 1e-3 {
				t.Errorf("prompt %d position %d: logits differ by %g", i, pos, d)
			}
		}
	}
	if testing.Short() {
		return
	}
	// The first 8 of torch's 32 greedy tokens (all 32 cost ~10 s here).
	p := g.Prompts[0]
	ids := slices.Clone(p.IDs)
	for range 8 {
		l := m.Forward(ids)
		ids = append(ids, pick(l[len(l)-1], 0, nil))
	}
	if got := ids[len(p.IDs):]; !slices.Equal(got, p.Greedy32[:8]) {
		t.Errorf("greedy continuation %v, torch %v", got, p.Greedy32[:8])
	}
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestGoldenPerplexity replays golden.json's held-out protocol with the Go
// tokenizer and the scalar reference forward: ~20 s of CPU (minutes under
// -race or a busy machine), so it runs only with TINYLM_PERPLEXITY=1.
func TestGoldenPerplexity(t *testing.T) {
	if os.Getenv("TINYLM_PERPLEXITY") == "" {
		t.Skip("set TINYLM_PERPLEXITY=1 to score testdata/heldout.txt (~2,600 tokens) with the reference forward")
	}
	m, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tk, err := tokenizer.Load("tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	g := loadGolden(t).Perplexity
	text, err := os.ReadFile(g.TextFile)
	if err != nil {
		t.Fatal(err)
	}
	ids := tk.Encode(string(text))
	if len(ids) != g.NumTokens {
		t.Fatalf("%d tokens, golden %d", len(ids), g.NumTokens)
	}
	sum, n, err := m.WindowNLL(context.Background(), ids, g.Window)
	if err != nil {
		t.Fatal(err)
	}
	ppl := math.Exp(sum / float64(n))
	if n != g.Predicted || math.Abs(ppl/g.Perplexity-1) > 1e-4 {
		t.Errorf("perplexity %.6f over %d tokens, torch %.6f over %d", ppl, n, g.Perplexity, g.Predicted)
	}
	t.Logf("held-out perplexity %.4f (torch %.4f)", ppl, g.Perplexity)
}

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, []string{"--dir", ".", "--prompt", "Call me Ishmael", "--tokens", "3"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"LlamaForCausalLM: vocab 2048", "parameters: 4196608", "Call me Ishmael"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(context.Background(), &out, []string{"--dir", t.TempDir()}); err == nil {
		t.Error("empty dir: no error")
	}
}
