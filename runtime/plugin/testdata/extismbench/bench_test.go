package extbench

import (
	"context"
	"os"
	"testing"

	extism "github.com/extism/go-sdk"
)

// BenchmarkExtism: an Extism instance's start from a compiled plugin, and
// a call of an exported function that does nothing with 1 KiB of input.
func BenchmarkExtism(b *testing.B) {
	wasm, _ := os.ReadFile("empty.wasm")
	ctx := context.Background()
	m := extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: wasm}}}
	input := make([]byte, 1024)
	b.Run("start", func(b *testing.B) {
		cp, err := extism.NewCompiledPlugin(ctx, m, extism.PluginConfig{EnableWasi: true}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cp.Close(ctx)
		for b.Loop() {
			p, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
			if err != nil {
				b.Fatal(err)
			}
			p.Close(ctx)
		}
	})
	b.Run("call-1KiB", func(b *testing.B) {
		p, err := extism.NewPlugin(ctx, m, extism.PluginConfig{EnableWasi: true}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close(ctx)
		for b.Loop() {
			if _, _, err := p.Call("run", input); err != nil {
				b.Fatal(err)
			}
		}
	})
}
