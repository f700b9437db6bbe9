package loadgen

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/bundletest"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// tinyBundle is the tiny-test preset, built once per test binary.
func tinyBundle(t testing.TB) string {
	t.Helper()
	return bundletest.Shared(t, "tiny-test").Dir
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
	if err := bundletest.RemoveShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}
