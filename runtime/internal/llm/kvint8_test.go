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

// qualityBundle builds the decoder the reduced-KV tests compare: the
// trained tiny model when its checkpoint is present, else the tiny-test
// preset.
func qualityBundle(t *testing.T, opts llama.Options) (*bundle.Bundle, string) {
	t.Helper()
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
		if _, err := m.runRows(ctx, []*kvcache.Sequence{kv}, 1); err != nil {
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
//
// float16 pools (llama.cpp's default cache type) the same way, at the same
// bar.
func TestReducedKVTopOneAgreement(t *testing.T) {
	orttest.Need(t)
	fp, name := loadQuality(t, llama.Options{}, "")
	for _, tc := range []struct {
		dtype kvcache.DType
		opts  llama.Options
		kv    string
	}{{kvcache.Int8, llama.Options{KVInt8: true}, "int8"}, {kvcache.Float16, llama.Options{KVFloat16: true}, "float16"}} {
		t.Run(tc.kv, func(t *testing.T) {
			q, _ := loadQuality(t, tc.opts, tc.kv)
			if q.Cache().Config().DType != tc.dtype {
				t.Fatalf("%s bundle loaded a %v cache", tc.kv, q.Cache().Config().DType)
			}
			topOneAgreement(t, fp, q, name, tc.kv)
		})
	}
}

// loadQuality loads qualityBundle(opts), checking its manifest's kv_dtype
// ("" for float32 pools).
func loadQuality(t *testing.T, opts llama.Options, kv string) (*Model, string) {
	t.Helper()
	b, name := qualityBundle(t, opts)
	if got := b.Manifest.Geometry.KVDType; got != kv {
		t.Fatalf("manifest kv_dtype %q, want %q", got, kv)
	}
	m, err := Load(context.Background(), b, Options{KV: kvcache.Options{DisablePrefixCache: true}, Session: ort.Options{IntraOpThreads: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, name
}

// topOneAgreement decodes fp's greedy continuations and q's teacher-forced
// on them, and wants q's argmax equal at ≥ 99 % of positions.
func topOneAgreement(t *testing.T, fp, q *Model, name, kv string) {
	t.Helper()
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
	t.Logf("%s: %s KV top-1 agreement %d/%d = %.2f%% over %d prompts (longest %d greedy decode steps)", name, kv, agree, n, 100*rate, len(prompts), longest)
	if longest < 256 {
		t.Fatalf("longest continuation %d steps, want 256", longest)
	}
	if rate < 0.99 {
		t.Fatalf("%s KV top-1 agreement %.2f%% < 99%%", kv, 100*rate)
	}
}

// A manifest whose kv_dtype disagrees with the graph's pools fails at
// load, naming the input, rather than at the first step.
func TestKVDTypeMismatchFailsAtLoad(t *testing.T) {
	orttest.Need(t)
	for _, tc := range []struct {
		opts     llama.Options
		has, say string
	}{
		{llama.Options{KVInt8: true}, "int8", "float32"},
		{llama.Options{KVFloat16: true}, "float16", "float32"},
		{llama.Options{KVFloat16: true}, "float16", "int8"},
	} {
		t.Run(tc.has+" said to be "+tc.say, func(t *testing.T) {
			b := tinyBundle(t, tc.opts)
			path := filepath.Join(b.Dir, bundle.ManifestFile)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			was := []byte(`"kv_dtype": "` + tc.has + `"`)
			if !bytes.Contains(data, was) {
				t.Fatalf("the manifest does not say %s", was)
			}
			data = bytes.Replace(data, was, []byte(`"kv_dtype": "`+tc.say+`"`), 1)
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
		})
	}
}
