package llm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/pkg/vec"
	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// tinyLMDir is the model trained here (examples/tinylm); the int8 quality
// test prefers it to the random tiny-test preset once it exists, since a
// trained model's confident logits are what int8 pages must preserve.
const tinyLMDir = "../../../examples/tinylm"

// qualityBundle builds the decoder the int8 test compares: the trained
// tiny model when its checkpoint is present, else the tiny-test preset.
func qualityBundle(t *testing.T, kvInt8 bool) (*bundle.Bundle, string) {
	t.Helper()
	opts := llama.Options{KVInt8: kvInt8}
	_, errCfg := os.Stat(filepath.Join(tinyLMDir, "config.json"))
	_, errST := os.Stat(filepath.Join(tinyLMDir, "model.safetensors"))
	if errCfg == nil && errST == nil {
		b, err := build.ImportHF(context.Background(), tinyLMDir, t.TempDir(), build.ImportOptions{Name: "tinylm", Options: opts})
		if err != nil {
			t.Fatal(err)
		}
		return b, "tinylm"
	}
	return tinyBundle(t, opts), "tiny-test"
}

// decodeArgmax runs prompt through m one position at a time, then decodes
// steps tokens, returning the argmax of each decode position's logits.
// With forced nil it decodes greedily (feeding back its own argmax, never
// stopping at EOS); otherwise it is teacher-forced: it feeds forced[i]
// after the i-th prediction whatever it predicted.
func decodeArgmax(t *testing.T, m *Model, prompt, forced []int32, steps int) []int32 {
	t.Helper()
	ctx := context.Background()
	id := m.generateID()
	if _, err := m.Admit(ctx, sched.Sequence{ID: id, Tokens: prompt, PromptLen: len(prompt)}); err != nil {
		t.Fatal(err)
	}
	defer m.Release(id)
	kv := m.seqs[uint64(id)].kv
	io := m.io
	var preds []int32
	for {
		p := kv.Computed()
		int64s(io.ids, 1)[0], int64s(io.pos, 1)[0], int64s(io.last, 1)[0] = int64(kv.Tokens()[p]), int64(p), 0
		var err error
		if io.slots, err = kv.Slots(io.slots[:0], 1); err != nil {
			t.Fatal(err)
		}
		if err := m.runRows(ctx, []*kvcache.Sequence{kv}, 1); err != nil {
			t.Fatal(err)
		}
		if p < len(prompt)-1 {
			continue
		}
		a := int32(vec.Argmax(m.Logits(0)))
		preds = append(preds, a)
		if len(preds) == steps {
			return preds
		}
		next := a
		if forced != nil {
			next = forced[len(preds)-1]
		}
		if err := kv.Append(next); err != nil {
			t.Fatal(err)
		}
		if err := kv.Reserve(kv.Len() - kv.Computed()); err != nil {
			t.Fatal(err)
		}
	}
}

// int8 KV pages keep the model's choices: over 256 greedy decode steps,
// teacher-forced on the fp32 continuation (so one divergence does not
// cascade), the int8-KV argmax equals the fp32-KV argmax at ≥ 99 % of
// positions (issue 3, item 5).
func TestInt8KVTopOneAgreement(t *testing.T) {
	orttest.Need(t)
	ctx := context.Background()
	load := func(kvInt8 bool) (*Model, string) {
		b, name := qualityBundle(t, kvInt8)
		if got := b.Manifest.Geometry.KVInt8(); got != kvInt8 {
			t.Fatalf("manifest kv_dtype %q, want int8 = %v", b.Manifest.Geometry.KVDType, kvInt8)
		}
		m, err := Load(ctx, b, Options{KV: kvcache.Options{DisablePrefixCache: true}, Session: ort.Options{IntraOpThreads: 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m, name
	}
	fp, name := load(false)
	q, _ := load(true)
	if q.Cache().Config().DType != kvcache.Int8 {
		t.Fatal("int8 bundle loaded a float32 cache")
	}
	// Prompts, each decoded for as many steps as the context allows, up
	// to 256. The trained model's context is 256 positions: from its BOS
	// alone it decodes 256 steps; "Call me Ishmael" (its tokenizer's ids,
	// as in golden.json) adds a second, shorter continuation.
	prompts := [][]int32{prompt(16, fp.Geometry().Vocab)}
	if name == "tinylm" {
		prompts = [][]int32{{0}, {68, 391, 397, 315, 862, 1688, 437}}
	}
	agree, n, longest := 0, 0, 0
	for _, p := range prompts {
		steps := min(256, fp.Geometry().MaxPositions+1-len(p))
		longest = max(longest, steps)
		want := decodeArgmax(t, fp, p, nil, steps) // the fp32 greedy continuation
		got := decodeArgmax(t, q, p, want, steps)
		a := 0
		for i := range want {
			if got[i] == want[i] {
				a++
			}
		}
		t.Logf("prompt of %d tokens: %d/%d positions agree", len(p), a, len(want))
		agree, n = agree+a, n+len(want)
	}
	rate := float64(agree) / float64(n)
	t.Logf("%s: int8 KV top-1 agreement %d/%d = %.2f%% over %d prompts (longest %d greedy decode steps)", name, agree, n, 100*rate, len(prompts), longest)
	if longest < 256 {
		t.Fatalf("longest continuation %d steps, want 256", longest)
	}
	if rate < 0.99 {
		t.Fatalf("int8 KV top-1 agreement %.2f%% < 99%%", 100*rate)
	}
}

// A manifest whose kv_dtype disagrees with the graph's pools fails at
// load, naming the input, rather than at the first step.
func TestKVDTypeMismatchFailsAtLoad(t *testing.T) {
	orttest.Need(t)
	b := tinyBundle(t, llama.Options{KVInt8: true})
	path := filepath.Join(b.Dir, bundle.ManifestFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`"kv_dtype": "int8"`), []byte(`"kv_dtype": "float32"`), 1)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err = bundle.Load(b.Dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(context.Background(), b, Options{Session: ort.Options{IntraOpThreads: 1}})
	if !errors.Is(err, ErrContract) || !strings.Contains(err.Error(), "key_cache.0") {
		t.Fatalf("Load: %v, want ErrContract naming key_cache.0", err)
	}
}
