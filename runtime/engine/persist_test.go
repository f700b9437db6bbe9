package engine

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// tinyVersion builds the tiny-test decoder as another version: the same
// weights, so only the version tells the two apart.
func tinyVersion(t *testing.T, version string) string {
	t.Helper()
	tinyBundle(t)
	cfg, src, err := llama.Preset("tiny-test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := build.BuildDecoder(context.Background(), dir, build.DecoderSpec{
		Name: "tiny-test", Version: version, Config: cfg, Weights: src, CreatedBy: "engine test",
	}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// persistRun opens an engine on bundle with the prefix cache persisted in
// dir, generates from prompt greedily and closes the engine (a clean stop
// saves). It returns the tokens, the prompt tokens the request found
// cached and the blocks restored from the file.
func persistRun(t *testing.T, dir, bundleDir string, prompt []int32, swapTo string) (out []int32, cached int, restored int64) {
	t.Helper()
	snk := &sink{}
	e, err := Open(context.Background(), Config{
		Models:        []ModelSpec{{Dir: bundleDir}},
		PrefixPersist: PrefixPersistConfig{Dir: dir},
		Session:       ort.Options{IntraOpThreads: 1},
		Observers:     []Observer{snk},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}()
	if swapTo != "" {
		if _, err := e.Swap(context.Background(), "tiny-test", ModelSpec{Dir: swapTo}, nil); err != nil {
			t.Fatal(err)
		}
	}
	out = run(t, e, prompt, GenerateOptions{MaxTokens: 8})
	r := snk.take(t, 1)[0]
	return out, r.CachedTokens, e.Stats().KV["tiny-test"].PrefixRestoredBlocks
}

// TestPrefixPersistAcrossRestart: a prompt computed before a clean stop is
// restored from the file after a restart — the record shows its cached
// tokens, and greedy output is the cold run's; a damaged file is ignored;
// a file written by another version (after a swap) is not served.
func TestPrefixPersistAcrossRestart(t *testing.T) {
	v1 := tinyBundle(t)
	dir := t.TempDir()
	prompt := ids(150, 7)
	bs := 16 // the tiny-test graph's block size

	cold, cached, _ := persistRun(t, dir, v1, prompt, "")
	if cached != 0 {
		t.Fatalf("first run found %d cached tokens", cached)
	}
	file := filepath.Join(dir, "tiny-test.kv")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("a clean stop saved no file: %v", err)
	}
	warm, cached, restored := persistRun(t, dir, v1, prompt, "")
	if want := (len(prompt) - 1) / bs * bs; cached != want || restored != int64(want/bs) {
		t.Errorf("after a restart: %d cached tokens and %d blocks restored, want %d and %d", cached, restored, want, want/bs)
	}
	if !slices.Equal(warm, cold) {
		t.Errorf("output from restored KV %v, cold %v", warm, cold)
	}

	// Damaged: the index fails its check, the file is ignored, the
	// answer is the cold one, and the clean stop writes a good file again.
	b, _ := os.ReadFile(file)
	b[len(b)/3] ^= 0xff
	if err := os.WriteFile(file, b[:len(b)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	out, cached, _ := persistRun(t, dir, v1, prompt, "")
	if cached != 0 || !slices.Equal(out, cold) {
		t.Errorf("from a damaged file: %d cached tokens, output %v (cold %v)", cached, out, cold)
	}
	if _, cached, _ = persistRun(t, dir, v1, prompt, ""); cached == 0 {
		t.Error("the file was not rewritten after the damaged one")
	}

	// A swap to version 2 mid-run: its file is version 2's, so version 1
	// after the next restart starts cold, and version 2 warm.
	v2 := tinyVersion(t, "2")
	if _, cached, _ = persistRun(t, dir, v1, prompt, v2); cached != 0 {
		t.Errorf("version 2 after the swap found %d cached tokens in version 1's file", cached)
	}
	if _, cached, _ = persistRun(t, dir, v2, prompt, ""); cached == 0 {
		t.Error("version 2 restarted found nothing of its own file")
	}
	if _, cached, _ = persistRun(t, dir, v1, prompt, ""); cached != 0 {
		t.Errorf("version 1 served %d tokens from version 2's file", cached)
	}
}

// TestPersistAcrossSwaps: versions swapped in and out while requests run,
// each saving its prefix cache as the loop goes idle between them; run
// with -race, a retired version's close must not meet the loop's upkeep.
func TestPersistAcrossSwaps(t *testing.T) {
	v1, v2 := tinyBundle(t), tinyVersion(t, "2")
	e, err := Open(context.Background(), Config{
		Models:        []ModelSpec{{Dir: v1}},
		PrefixPersist: PrefixPersistConfig{Dir: t.TempDir(), EverySeconds: 1e-9},
		Session:       ort.Options{IntraOpThreads: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			for _, err := range e.GenerateTokens(context.Background(), "tiny-test", ids(40, i%3), GenerateOptions{MaxTokens: 2}).Tokens() {
				if err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	for i := range 12 {
		dir := v1
		if i%2 == 0 {
			dir = v2
		}
		if _, err := e.Swap(context.Background(), "tiny-test", ModelSpec{Dir: dir}, nil); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}
