package loadgen

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

var (
	tinyOnce sync.Once
	tinyDir  string
	tinyErr  error
)

// tinyBundle builds the tiny-test preset once per test binary.
func tinyBundle(t testing.TB) string {
	t.Helper()
	tinyOnce.Do(func() {
		cfg, src, err := llama.Preset("tiny-test")
		if err != nil {
			tinyErr = err
			return
		}
		dir, err := os.MkdirTemp("", "loadgen-tiny-")
		if err != nil {
			tinyErr = err
			return
		}
		tinyDir = dir
		_, tinyErr = build.BuildDecoder(context.Background(), dir, build.DecoderSpec{
			Name: "tiny-test", Version: "1", Config: cfg, Weights: src, CreatedBy: "loadgen test",
		})
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyDir
}

// openTiny opens an engine over the tiny-test bundle.
func openTiny(t testing.TB) (*engine.Engine, *engine.Config) {
	t.Helper()
	orttest.Need(t)
	cfg := engine.Config{Models: []engine.ModelSpec{{Dir: tinyBundle(t)}}, KV: engine.KVOptions{BudgetBytes: 8 << 20}}
	cfg.Session.IntraOpThreads = 1
	e, err := engine.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e, &cfg
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tinyDir != "" {
		os.RemoveAll(tinyDir)
	}
	os.Exit(code)
}
