package extbench

import (
	"context"
	"os"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// BenchmarkOurs: the same measurements through runtime/plugin (the
// empty plugin, 1 KiB in as one uint8 tensor).
func BenchmarkOurs(b *testing.B) {
	wasm, _ := os.ReadFile("ours-empty.wasm")
	ctx := context.Background()
	p, err := plugin.Load(ctx, "empty", wasm, plugin.Config{MaxInstances: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	b.Run("start", func(b *testing.B) {
		var sum int64
		for b.Loop() {
			q, err := plugin.Load(ctx, "empty", wasm, plugin.Config{MaxInstances: 1})
			if err != nil {
				b.Fatal(err)
			}
			sum += q.Info().Instantiate.Nanoseconds()
			q.Close(ctx)
		}
		b.ReportMetric(float64(sum)/float64(b.N), "instantiate-ns")
	})
	req := abi.Encode(nil, []abi.Tensor{abi.Bytes("in", make([]byte, 1024))})
	b.Run("call-1KiB", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.CallRaw(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
