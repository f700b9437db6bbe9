package quant_test

import (
	"context"
	"math"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/bundletest"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// tinyBundle builds the tiny-test preset with an emitter (nil: fp32).
func tinyBundle(t testing.TB, em llama.WeightEmitter) *bundle.Bundle {
	t.Helper()
	return bundletest.Decoder(t, "tiny-test", llama.Options{Emitter: em})
}

func meanNLL(t testing.TB, b *bundle.Bundle, tokens []int32) float64 {
	t.Helper()
	m, err := engine.OpenScorer(context.Background(), engine.ModelSpec{Dir: b.Dir}, engine.ScorerOptions{Session: ort.Options{IntraOpThreads: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	nll, n, err := m.Score(context.Background(), tokens)
	if err != nil {
		t.Fatal(err)
	}
	return nll / float64(n)
}

func testTokens() []int32 {
	toks := make([]int32, 48)
	for i := range toks {
		toks[i] = int32((i*37 + 11) % 256)
	}
	return toks
}

// TestEmitterSchemesRunOnORT builds the tiny decoder in every scheme and
// checks ONNX Runtime runs it (MatMulNBits bits 4 and 8, zero points, a
// partial block: K=64 under block 128) with a mean NLL near fp32's.
func TestEmitterSchemesRunOnORT(t *testing.T) {
	orttest.Need(t)
	toks := testTokens()
	ref := meanNLL(t, tinyBundle(t, nil), toks)
	for _, tc := range []struct {
		scheme string
		tol    float64 // relative NLL difference allowed
	}{
		{"int4-b32", 0.05}, {"int4-b32-acc1", 0.05}, {"int4-b128", 0.08}, {"int4-b32-asym", 0.05},
		{"int8", 0.01}, {"int8-asym-acc1", 0.01}, {"int8-pc", 0.01}, {"fp16", 0.001},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			em, err := quant.NewEmitter(tc.scheme)
			if err != nil {
				t.Fatal(err)
			}
			b := tinyBundle(t, em)
			if b.Manifest.Quantization != em.Scheme() {
				t.Errorf("manifest quantization %q, want %q", b.Manifest.Quantization, em.Scheme())
			}
			got := meanNLL(t, b, toks)
			t.Logf("%s: mean nll %.5f vs fp32 %.5f", tc.scheme, got, ref)
			if d := math.Abs(got-ref) / ref; d > tc.tol || math.IsNaN(got) {
				t.Errorf("mean nll %.5f vs fp32 %.5f: relative diff %.4f > %.3f", got, ref, d, tc.tol)
			}
		})
	}
}

// TestQuantizeBundleMatchesEmitter quantises a built fp32 bundle with the
// graph pass and checks it scores exactly like the same scheme applied by
// the emitter at build time (same quantiser, same layout), and that the
// bundle records its scheme and reference.
func TestQuantizeBundleMatchesEmitter(t *testing.T) {
	orttest.Need(t)
	ref := tinyBundle(t, nil)
	for _, scheme := range []string{"int4-b32-acc1", "int8-pc"} {
		t.Run(scheme, func(t *testing.T) { quantizeBundleMatchesEmitter(t, ref, scheme) })
	}
}

func quantizeBundleMatchesEmitter(t *testing.T, ref *bundle.Bundle, scheme string) {
	sc, err := quant.ParseScheme(scheme)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	qb, side, err := quant.QuantizeBundle(context.Background(), ref.Dir, out, quant.Options{Scheme: sc, Keep: []string{"lm_head"}})
	if err != nil {
		t.Fatal(err)
	}
	if qb.Manifest.Quantization != sc.String() || side.Reference.Name != "tiny-test" || side.Reference.ModelSHA256 == "" {
		t.Fatalf("manifest %q, sidecar %+v", qb.Manifest.Quantization, side.Reference)
	}
	got, err := quant.ReadSidecar(out)
	if err != nil || len(got.Layers) != 2*4+1+1 { // per layer qkv, o, gate_up, down; lm_head; embed_tokens (GatherBlockQuantized)
		t.Fatalf("sidecar: %v, %d layers", err, len(got.Layers))
	}
	em, _ := quant.NewEmitter(scheme, "lm_head")
	toks := testTokens()
	a, b := meanNLL(t, qb, toks), meanNLL(t, tinyBundle(t, em), toks)
	if math.Abs(a-b) > 1e-5 {
		t.Fatalf("graph pass mean nll %.7f, emitter %.7f", a, b)
	}
	if _, _, err := quant.QuantizeBundle(context.Background(), qb.Dir, t.TempDir(), quant.Options{Scheme: sc}); err == nil {
		t.Fatal("quantising a quantised bundle succeeded")
	}
}
