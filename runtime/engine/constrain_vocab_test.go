package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// TestConstrainedOutputsLargeVocabularies: the same 200 constrained
// outputs on models with the real Llama-3 (128,256 tokens) and Qwen3
// (151,936) vocabularies, whose tokens span many grammar symbols (quotes
// with letters, braces with spaces, digits in runs). The models are the
// tiny-test shape with random weights: they propose arbitrary tokens, so
// the mask is all that keeps the output valid.
func TestConstrainedOutputsLargeVocabularies(t *testing.T) {
	orttest.Need(t)
	per := 40 // 5 schemas × 40 = 200 outputs per vocabulary
	if testing.Short() {
		per = 4
	} else if raceEnabled {
		per = 8 // make test's -race run: 40 each; without -race, the 200
	}
	for _, v := range []struct {
		name  string
		vocab int
		bos   int64
		eos   []int64
	}{{"llama3", 128256, 128000, []int64{128001, 128009}}, {"qwen3", 151936, 151643, []int64{151645, 151643}}} {
		t.Run(v.name, func(t *testing.T) {
			tok := filepath.Join(tokenizersDir(), v.name, "tokenizer.json")
			if _, err := os.Stat(tok); err != nil {
				t.Skipf("the %s tokenizer is not at %s (platforms/tokenizers/fetch.sh, part of make setup)", v.name, tok)
			}
			cfg, src, err := llama.Preset("tiny-test")
			if err != nil {
				t.Fatal(err)
			}
			cfg.VocabSize = v.vocab
			cfg.BOSTokenID, cfg.EOSTokenID = llama.TokenIDs{v.bos}, llama.TokenIDs(v.eos)
			dir := t.TempDir()
			if _, err := build.BuildDecoder(context.Background(), dir, build.DecoderSpec{Name: "m", Version: "1", Config: cfg, Weights: src, Tokenizer: tok}); err != nil {
				t.Fatal(err)
			}
			ecfg := Config{Models: []ModelSpec{{Dir: dir}}}
			ecfg.Session.IntraOpThreads = 1
			e, err := Open(context.Background(), ecfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			checkConstrained(t, per, func(ctx context.Context, seed uint64, opts GenerateOptions) *Stream {
				return e.Generate(ctx, "m", fmt.Sprintf("Item %d:", seed), opts)
			})
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
