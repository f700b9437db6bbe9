package engine

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// embedDir is examples/tinylm imported with the hidden_states output, once
// per test binary.
var embedDir = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "engine-embed-")
	if err != nil {
		return "", err
	}
	textDirs = append(textDirs, dir)
	_, err = build.ImportHF(context.Background(), "../../examples/tinylm", dir,
		build.ImportOptions{Name: "tinyembed", Options: llama.Options{HiddenStates: true}})
	return dir, err
})

// openEmbed opens an engine on the tiny model with hidden states, the
// tiny-test decoder without them, and the sentence-embedding model of
// writeEncoder.
func openEmbed(t *testing.T) *Engine {
	t.Helper()
	orttest.Need(t)
	dir, err := embedDir()
	if err != nil {
		t.Fatal(err)
	}
	return openModels(t, dir, tinyBundle(t), writeEncoder(t))
}

func texts(xs ...string) []EmbedInput {
	in := make([]EmbedInput, len(xs))
	for i, x := range xs {
		in[i] = EmbedInput{Text: x}
	}
	return in
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func norm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func TestEmbedDecoder(t *testing.T) {
	e := openEmbed(t)
	ctx := context.Background()
	const model = "tinyembed"
	info := e.Models()
	dims := 0
	for _, m := range info {
		if m.Name == model {
			dims = m.Embeddings
		}
	}
	if dims != 256 {
		t.Fatalf("ModelInfo.Embeddings = %d, want the hidden size 256", dims)
	}
	all := texts("The cat sat on the mat.", "Once upon a time there was a little robot.", "cat", "The cat sat on the mat.")
	batched, usage, err := e.Embed(ctx, model, all, EmbedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(batched) != 4 || len(batched[0]) != dims {
		t.Fatalf("%d vectors of %d", len(batched), len(batched[0]))
	}
	tok := e.Tokenizer(model)
	want := 0
	for _, in := range all {
		want += len(tok.EncodeWith(in.Text, tokenizer.EncodeOptions{AddSpecialTokens: true, SplitSpecialTokens: true}))
	}
	if usage.PromptTokens != want {
		t.Fatalf("usage %d tokens, want %d", usage.PromptTokens, want)
	}
	for i, v := range batched {
		if n := norm(v); math.Abs(n-1) > 1e-5 {
			t.Fatalf("vector %d has norm %g, want 1", i, n)
		}
	}
	// alone or beside others, the same vector
	for i, in := range all {
		alone, _, err := e.Embed(ctx, model, []EmbedInput{in}, EmbedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(alone[0], batched[i]); d > 1e-5 {
			t.Fatalf("input %d: alone and batched differ by %g", i, d)
		}
	}
	// beside a generation running on the same model
	stream := e.Generate(ctx, model, "Once upon a time", GenerateOptions{MaxTokens: 40, Sampling: &Sampling{}})
	done := make(chan Summary)
	go func() { done <- stream.Summary() }()
	beside, _, err := e.Embed(ctx, model, all[:1], EmbedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := <-done; s.Err != nil || s.OutputTokens == 0 {
		t.Fatalf("the generation beside: %+v", s)
	}
	if d := maxAbsDiff(beside[0], batched[0]); d > 1e-5 {
		t.Fatalf("beside a generation the vector differs by %g", d)
	}
	if maxAbsDiff(batched[0], batched[3]) != 0 {
		t.Fatal("the same text twice in one call gave different vectors")
	}
	if cos := dot(batched[0], batched[1]); cos > 0.9999 {
		t.Fatalf("different texts: cosine %g", cos)
	}
	if maxAbsDiff(batched[0], batched[2]) < 1e-3 {
		t.Fatal("different texts gave the same vector")
	}
	// token ids give what the text gives
	ids := tok.EncodeWith(all[1].Text, tokenizer.EncodeOptions{AddSpecialTokens: true, SplitSpecialTokens: true})
	in := EmbedInput{Tokens: make([]int32, len(ids))}
	for i, id := range ids {
		in.Tokens[i] = int32(id)
	}
	byIDs, _, err := e.Embed(ctx, model, []EmbedInput{in}, EmbedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(byIDs[0], batched[1]); d > 1e-5 {
		t.Fatalf("token ids and text differ by %g", d)
	}
	// unnormalised is the same direction; last-token pooling another vector
	raw, _, err := e.Embed(ctx, model, all[:1], EmbedOptions{Unnormalized: true})
	if err != nil {
		t.Fatal(err)
	}
	n := norm(raw[0])
	for i := range raw[0] {
		raw[0][i] /= float32(n)
	}
	if math.Abs(n-1) < 1e-3 || maxAbsDiff(raw[0], batched[0]) > 1e-5 {
		t.Fatalf("unnormalised vector (norm %g) is not the normalised one scaled", n)
	}
	last, _, err := e.Embed(ctx, model, all[:1], EmbedOptions{Pooling: PoolLast})
	if err != nil {
		t.Fatal(err)
	}
	if maxAbsDiff(last[0], batched[0]) < 1e-3 {
		t.Fatal("last-token pooling gave the mean")
	}
}

func dot(a, b []float32) float64 {
	s := 0.0
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestEmbedErrors(t *testing.T) {
	e := openEmbed(t)
	ctx := context.Background()
	long := make([]int32, 257)
	for i := range long {
		long[i] = int32(i % 100)
	}
	var ie *InputError
	_, _, err := e.Embed(ctx, "tinyembed", []EmbedInput{{Text: "fine"}, {Tokens: long}}, EmbedOptions{})
	if !errors.As(err, &ie) || !errors.Is(err, ErrPromptTooLong) || ie.Index != 1 || ie.Tokens != 257 || ie.Context != 256 {
		t.Fatalf("too long: %v", err)
	}
	// the whole context fits: an embedding generates nothing
	if _, _, err := e.Embed(ctx, "tinyembed", []EmbedInput{{Tokens: long[:256]}}, EmbedOptions{}); err != nil {
		t.Fatalf("a full context: %v", err)
	}
	_, _, err = e.Embed(ctx, "tinyembed", []EmbedInput{{Text: "a"}, {}}, EmbedOptions{})
	if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidRequest) || ie.Index != 1 {
		t.Fatalf("empty input: %v", err)
	}
	for name, tc := range map[string]struct {
		model string
		in    []EmbedInput
		opts  EmbedOptions
		want  error
	}{
		"unknown model":  {"nope", texts("a"), EmbedOptions{}, ErrUnknownModel},
		"no inputs":      {"tinyembed", nil, EmbedOptions{}, ErrInvalidRequest},
		"dimensions":     {"tinyembed", texts("a"), EmbedOptions{Dimensions: 64}, ErrInvalidRequest},
		"no hidden":      {"tiny-test", []EmbedInput{{Tokens: []int32{1, 2}}}, EmbedOptions{}, ErrInvalidRequest},
		"vocabulary":     {"tinyembed", []EmbedInput{{Tokens: []int32{1, 5000}}}, EmbedOptions{}, ErrInvalidRequest},
		"first, decoder": {"tinyembed", texts("a"), EmbedOptions{Pooling: PoolFirst}, ErrInvalidRequest},
	} {
		if _, _, err := e.Embed(ctx, tc.model, tc.in, tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if _, _, err := e.Embed(ctx, "tinyembed", texts("a"), EmbedOptions{Dimensions: 256}); err != nil {
		t.Fatalf("dimensions equal to the model's: %v", err)
	}
}

// encoderTable and typeTable are writeEncoder's weights.
var encoderTable, typeTable = func() ([]float32, []float32) {
	r := rand.New(rand.NewPCG(7, 7))
	e := make([]float32, 2048*8)
	for i := range e {
		e[i] = float32(r.NormFloat64())
	}
	return e, []float32{.5, -.5, .25, 0, 0, 1, 0, -1, 9, 9, 9, 9, 9, 9, 9, 9}
}()

// writeEncoder writes a one-shot bundle shaped like a sentence-embedding
// export (input_ids, attention_mask, token_type_ids → last_hidden_state
// [batch, seq, 8]) with examples/tinylm's tokenizer: each token's state is
// its row of encoderTable plus typeTable's row of its type, masked.
func writeEncoder(t *testing.T) string {
	t.Helper()
	b := onnx.NewBuilder("encoder")
	ids := b.Input("input_ids", onnx.TensorProto_INT64, onnx.Sym("batch"), onnx.Sym("seq"))
	mask := b.Input("attention_mask", onnx.TensorProto_INT64, onnx.Sym("batch"), onnx.Sym("seq"))
	types := b.Input("token_type_ids", onnx.TensorProto_INT64, onnx.Sym("batch"), onnx.Sym("seq"))
	x := b.Op("Add", []string{
		b.Op("Gather", []string{b.Float32("embed", []int64{2048, 8}, encoderTable), ids}),
		b.Op("Gather", []string{b.Float32("types", []int64{2, 8}, typeTable), types}),
	})
	m := b.Op("Unsqueeze", []string{b.Op("Cast", []string{mask}, onnx.AttrInt("to", int64(onnx.TensorProto_FLOAT))), b.Ints(-1)})
	b.Node(onnx.DomainONNX, "Mul", []string{x, m}, []string{"last_hidden_state"})
	b.Output("last_hidden_state", onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Sym("seq"), onnx.Fixed(8))
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokData, err := os.ReadFile("../../examples/tinylm/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string][]byte{"model.onnx": data, "tokenizer.json": tokData} {
		if err := os.WriteFile(filepath.Join(dir, name), d, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := bundle.Write(dir, &bundle.Manifest{Name: "encoder", Version: "1", Kind: bundle.KindOneShot,
		Model: "model.onnx", Tokenizer: "tokenizer.json"}, "model.onnx", "tokenizer.json"); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEmbedOneshotEncoder: a sentence-embedding export runs through the
// one-shot path, mean-pooled (or first/last) over its tokens, against the
// same pooling computed here from its weights.
func TestEmbedOneshotEncoder(t *testing.T) {
	e := openEmbed(t)
	ctx := context.Background()
	tok := e.Tokenizer("encoder")
	if tok == nil {
		t.Fatal("the encoder's tokenizer was not loaded")
	}
	in := texts("The cat sat on the mat.", "a robot", "The cat sat on the mat.")
	for _, p := range []Pooling{PoolDefault, PoolFirst, PoolLast} {
		got, usage, err := e.Embed(ctx, "encoder", in, EmbedOptions{Pooling: p})
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for i, x := range in {
			ids := tok.EncodeWith(x.Text, tokenizer.EncodeOptions{AddSpecialTokens: true, SplitSpecialTokens: true})
			total += len(ids)
			want := make([]float32, 8)
			rows := ids
			switch p {
			case PoolFirst:
				rows = ids[:1]
			case PoolLast:
				rows = ids[len(ids)-1:]
			}
			for _, id := range rows {
				for j := range 8 {
					want[j] += (encoderTable[id*8+j] + typeTable[j]) / float32(len(rows))
				}
			}
			normalize(want)
			if d := maxAbsDiff(got[i], want); d > 1e-5 {
				t.Fatalf("pooling %v, input %d: differs from the weights' by %g", p, i, d)
			}
		}
		if usage.PromptTokens != total {
			t.Fatalf("usage %d, want %d", usage.PromptTokens, total)
		}
	}
}

// TestEmbedPoolingAgainstWeights checks the pooled vectors against what
// the model says through other doors: the last token's hidden state times
// the checkpoint's lm_head is the logits, whose differences Generate's
// log-probabilities report; and, the decoder being causal, the mean over
// a prompt's positions is the mean of the last states of its prefixes.
func TestEmbedPoolingAgainstWeights(t *testing.T) {
	e := openEmbed(t)
	ctx := context.Background()
	src, err := build.OpenSafetensors("../../examples/tinylm")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	lm, err := src.Tensor("lm_head.weight")
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{5, 77, 300, 12, 901, 44, 8}
	raw := EmbedOptions{Unnormalized: true}
	lastOf := func(p []int32) []float32 {
		v, _, err := e.Embed(ctx, "tinyembed", []EmbedInput{{Tokens: p}}, EmbedOptions{Pooling: PoolLast, Unnormalized: true})
		if err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
	h := lastOf(prompt)
	var top []TokenLogProb
	for tok, err := range e.GenerateTokens(ctx, "tinyembed", prompt, GenerateOptions{MaxTokens: 1, Sampling: &Sampling{}, TopLogProbs: 5}).Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		top = tok.Top
	}
	if len(top) != 5 {
		t.Fatalf("%d alternatives", len(top))
	}
	logit := func(id int32) float64 {
		s := 0.0
		for j, x := range h {
			s += float64(lm.Data[int(id)*len(h)+j]) * float64(x)
		}
		return s
	}
	for _, a := range top[1:] {
		got, want := logit(top[0].ID)-logit(a.ID), float64(top[0].LogProb-a.LogProb)
		if math.Abs(got-want) > 1e-3 {
			t.Fatalf("lm_head·h: logit difference %d−%d is %g, the log-probabilities say %g", top[0].ID, a.ID, got, want)
		}
	}
	mean, _, err := e.Embed(ctx, "tinyembed", []EmbedInput{{Tokens: prompt}}, raw)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(h))
	for n := 1; n <= len(prompt); n++ {
		for j, x := range lastOf(prompt[:n]) {
			want[j] += x / float32(len(prompt))
		}
	}
	if d := maxAbsDiff(mean[0], want); d > 1e-4 {
		t.Fatalf("mean pooling differs from the mean of the prefixes' last states by %g", d)
	}
}

// BenchmarkEmbeddings reports embedded tokens per second on the tiny model
// with hidden states, one call of 1 and of 8 inputs of 32 tokens.
func BenchmarkEmbeddings(b *testing.B) {
	orttest.Need(b)
	dir, err := embedDir()
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Models: []ModelSpec{{Dir: dir}}}
	cfg.Session.IntraOpThreads = 1
	e, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(context.Background())
	for _, batch := range []int{1, 8} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			in := make([]EmbedInput, batch)
			for i := range in {
				in[i].Tokens = ids(32, i)
			}
			tokens := 0
			for b.Loop() {
				_, u, err := e.Embed(context.Background(), "tinyembed", in, EmbedOptions{})
				if err != nil {
					b.Fatal(err)
				}
				tokens += u.PromptTokens
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
