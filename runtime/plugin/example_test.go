package plugin_test

import (
	"context"
	"fmt"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// A plugin is loaded once (compiled through the disk cache) and called per
// request; each call is sandboxed and bounded.
func Example() {
	ctx := context.Background()
	p, err := plugin.LoadFile(ctx, "build/plugins/ctc.wasm", plugin.Config{
		MemoryMB:    64,
		CallTimeout: 500 * time.Millisecond,
		Grants:      plugin.Grants{Dirs: []plugin.Mount{{Host: "/opt/ocr", Guest: "/dict"}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close(ctx)
	logits := make([]float32, 80*6625)
	out, err := p.Call(ctx, []abi.Tensor{abi.F32("logits", []int64{1, 80, 6625}, logits)})
	if err != nil {
		fmt.Println(err)
		return
	}
	text, _ := abi.Find(out, "text")
	fmt.Println(text.Text())
}
