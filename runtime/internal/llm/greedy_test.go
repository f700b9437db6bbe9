package llm

import (
	"context"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/pkg/vec"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

func TestGreedyOutputName(t *testing.T) {
	if outputGreedy != llama.OutputGreedy {
		t.Fatalf("outputGreedy %q, pkg/onnx/llama's OutputGreedy %q", outputGreedy, llama.OutputGreedy)
	}
}

// TestGreedyOutputMatches: on the kernel's int4 graph, which has the
// greedy output, every row of prefill and decode steps (three sequences
// decoding together) gets from the graph the argmax of its logits, and
// the step emits it (TestSampleMaskedArgmax has when the sampler takes
// it).
func TestGreedyOutputMatches(t *testing.T) {
	orttest.Need(t)
	em, err := quant.NewEmitter("int4-b32")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(context.Background(), tinyBundle(t, llama.Options{Emitter: em}), Options{Session: ort.Options{IntraOpThreads: 2}, KV: kvcache.Options{DisablePrefixCache: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.io.greedy == nil {
		t.Fatalf("the int4 kernel graph has no %s output", outputGreedy)
	}
	V := m.Geometry().Vocab
	check := func(what string, got []sched.Sampled) {
		t.Helper()
		g := int64s(m.io.greedy, len(got))
		for i := range got {
			want := vec.Argmax(m.Logits(i))
			if g[i] != int64(want) {
				t.Fatalf("%s row %d: the graph's argmax %d, the logits' %d", what, i, g[i], want)
			}
			if got[i].Token != int32(want) {
				t.Fatalf("%s row %d: emitted %d, want the argmax %d", what, i, got[i].Token, want)
			}
		}
	}
	decodeTogetherEach(t, m, [][]int32{prompt(14, V), prompt(30, V)[5:], prompt(9, V)[2:]}, 6, check)
}
