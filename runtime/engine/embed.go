package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/internal/llm"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// Pooling is how Embed reduces an input's final hidden states (one per
// token) to one vector.
type Pooling uint8

const (
	// PoolDefault is the model's own: a one-shot embedding model's
	// sentence_embedding output when it has one, otherwise PoolMean.
	PoolDefault Pooling = iota
	// PoolMean averages every token's hidden state. It is the default for
	// a decoder: a decoder not trained for embeddings spreads what it read
	// over every position, and the mean of them is the more robust vector
	// (and sentence-transformers' default, all-MiniLM's among them).
	PoolMean
	// PoolLast takes the last token's hidden state, the one that attended
	// to the whole input in a causal decoder: what decoder embedding models
	// trained for it (e5-mistral, gte-Qwen2) expect.
	PoolLast
	// PoolFirst takes the first token's ([CLS] of a BERT-style encoder such
	// as bge). One-shot embedding models only: a causal decoder's first
	// position has seen one token.
	PoolFirst
)

var poolingNames = map[Pooling]string{PoolDefault: "default", PoolMean: "mean", PoolLast: "last", PoolFirst: "first"}

func (p Pooling) String() string {
	if s, ok := poolingNames[p]; ok {
		return s
	}
	return fmt.Sprintf("pooling(%d)", uint8(p))
}

// ParsePooling reads a Pooling by its name ("mean", "last", "first" or
// "cls", "" or "default").
func ParsePooling(s string) (Pooling, error) {
	if s == "cls" {
		return PoolFirst, nil
	}
	if s == "" {
		return PoolDefault, nil
	}
	for p, n := range poolingNames {
		if n == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: pooling %q (want mean, last, first or cls)", ErrInvalidRequest, s)
}

// EmbedInput is one input of Embed: a text, encoded with the model's
// tokenizer as Generate encodes a prompt (its special tokens added), or
// token ids, used as they are. Exactly one is set.
type EmbedInput struct {
	Text   string
	Tokens []int32
}

// EmbedOptions configure one Embed call. The zero value pools the model's
// way and L2-normalises each vector.
type EmbedOptions struct {
	// Pooling reduces the hidden states; PoolDefault takes the model's.
	Pooling Pooling
	// Unnormalized returns the pooled vectors as they are instead of
	// scaled to unit L2 norm.
	Unnormalized bool
	// Dimensions, when positive, must equal the model's embedding size:
	// no bundle declares that its vectors may be truncated (Matryoshka),
	// so a shorter vector is refused rather than cut.
	Dimensions int
	// Class, SLO and FailFast are as in GenerateOptions: an embedding is
	// admitted by the scheduler like any other request.
	Class    Class
	SLO      SLO
	FailFast bool
	// KeepAlive is as in GenerateOptions.
	KeepAlive *time.Duration
}

// EmbedUsage counts the tokens an Embed call computed.
type EmbedUsage struct {
	PromptTokens int
}

// InputError is an Embed input refused before it ran: empty (it wraps
// ErrInvalidRequest) or longer than the model's context (ErrPromptTooLong).
type InputError struct {
	Model string
	// Index is the input's position in the call.
	Index int
	// Tokens is its length in tokens; Context the model's context length
	// (zero for an empty input).
	Tokens, Context int
}

func (e *InputError) Error() string {
	if e.Tokens == 0 {
		return fmt.Sprintf("engine: %s: input %d is empty (no tokens)", e.Model, e.Index)
	}
	return fmt.Sprintf("engine: %s: input %d has %d tokens, over the model's context of %d", e.Model, e.Index, e.Tokens, e.Context)
}

// Unwrap makes errors.Is(err, ErrPromptTooLong) hold, or ErrInvalidRequest
// for an empty input.
func (e *InputError) Unwrap() error {
	if e.Tokens == 0 {
		return ErrInvalidRequest
	}
	return ErrPromptTooLong
}

// Embed returns one vector per input: the model's final hidden states,
// pooled and (unless opts.Unnormalized) L2-normalised. A decoder needs
// the hidden_states output (bundles built with llama.Options.HiddenStates,
// `edgeinfer model import --hidden-states`); each input is a request of
// its own that the scheduler admits like a generation (a prefill with no
// decode: it computes every token, taking nothing from the prefix cache),
// so embeddings and chats share the device by class. A one-shot embedding
// model (input_ids → last_hidden_state or sentence_embedding, a tokenizer
// in its bundle) runs through Infer's dynamic batching.
//
// The vectors do not depend on what else runs: an input gives the same
// vector alone or beside others.
func (e *Engine) Embed(ctx context.Context, model string, inputs []EmbedInput, opts EmbedOptions) ([][]float32, EmbedUsage, error) {
	var usage EmbedUsage
	if len(inputs) == 0 {
		return nil, usage, fmt.Errorf("%w: %s: no input to embed", ErrInvalidRequest, model)
	}
	if _, ok := poolingNames[opts.Pooling]; !ok {
		return nil, usage, fmt.Errorf("%w: %v", ErrInvalidRequest, opts.Pooling)
	}
	m, err := e.acquire(ctx, model, opts.KeepAlive)
	if err != nil {
		return nil, usage, err
	}
	defer m.end()
	dims := m.info.Embeddings
	switch {
	case dims == 0 && m.dec != nil:
		return nil, usage, fmt.Errorf("%w: %s has no hidden_states output to pool embeddings from (rebuild it with `edgeinfer model import --hidden-states`)", ErrInvalidRequest, model)
	case dims == 0:
		return nil, usage, fmt.Errorf("%w: %s is not an embedding model (a one-shot model needs the input input_ids, the output last_hidden_state or sentence_embedding, and a tokenizer)", ErrInvalidRequest, model)
	case opts.Dimensions < 0 || (opts.Dimensions > 0 && opts.Dimensions != dims):
		return nil, usage, fmt.Errorf("%w: dimensions %d: %s gives vectors of %d and does not declare that they may be truncated", ErrInvalidRequest, opts.Dimensions, model, dims)
	case m.dec != nil && opts.Pooling == PoolFirst:
		return nil, usage, fmt.Errorf("%w: pooling first: %s is a causal decoder, whose first position has seen one token (use mean or last)", ErrInvalidRequest, model)
	}
	ids, err := m.embedIDs(model, inputs)
	if err != nil {
		return nil, usage, err
	}
	for _, x := range ids {
		usage.PromptTokens += len(x)
	}
	var vecs [][]float32
	if m.dec != nil {
		vecs, err = e.embedDecoder(ctx, m, ids, opts)
	} else {
		vecs, err = e.embedOneshot(ctx, m, ids, opts)
	}
	if err != nil {
		return nil, usage, err
	}
	if !opts.Unnormalized {
		for _, v := range vecs {
			normalize(v)
		}
	}
	return vecs, usage, nil
}

// embedIDs tokenises the inputs and checks them against the vocabulary and
// the context.
func (m *model) embedIDs(name string, inputs []EmbedInput) ([][]int32, error) {
	out := make([][]int32, len(inputs))
	for i, in := range inputs {
		switch {
		case in.Text != "" && in.Tokens != nil:
			return nil, fmt.Errorf("%w: input %d has both a text and token ids", ErrInvalidRequest, i)
		case in.Tokens != nil:
			if err := m.checkVocab(in.Tokens, fmt.Sprintf("input %d", i)); err != nil {
				return nil, err
			}
			out[i] = in.Tokens
		case in.Text != "":
			if m.tok == nil {
				return nil, fmt.Errorf("%w: %q: input %d is a text (send token ids)", ErrNoTokenizer, name, i)
			}
			out[i] = encodeIDs(m.tok, in.Text, true)
		}
		if len(out[i]) == 0 {
			return nil, &InputError{Model: name, Index: i}
		}
		if c := m.info.Context; c > 0 && len(out[i]) > c {
			return nil, &InputError{Model: name, Index: i, Tokens: len(out[i]), Context: c}
		}
	}
	return out, nil
}

// embedDecoder submits every input as a prefill-only request, so the
// scheduler runs them beside other work, and waits for them all.
func (e *Engine) embedDecoder(ctx context.Context, m *model, ids [][]int32, opts EmbedOptions) ([][]float32, error) {
	pool := llm.PoolMean
	if opts.Pooling == PoolLast {
		pool = llm.PoolLast
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a failed input ends the others
	type pending struct {
		st  *sched.Stream
		emb *llm.Embedding
	}
	reqs := make([]pending, 0, len(ids))
	var errs []error
	for _, p := range ids {
		emb := &llm.Embedding{Pooling: pool}
		m.begin(nil)
		st, err := e.s.Submit(ctx, sched.Request{
			Model: m.key, Class: opts.Class.sched(), Prompt: p, MaxTokens: 1, LoadTime: m.takeLoad(),
			SLO: sched.SLO(opts.SLO), FailFast: opts.FailFast, Attach: emb, OnFinish: m.end,
		})
		if err != nil {
			m.end()
			errs = append(errs, public(err))
			break
		}
		reqs = append(reqs, pending{st, emb})
	}
	if errs != nil {
		cancel()
	}
	vecs := make([][]float32, len(ids))
	for i, r := range reqs {
		<-r.st.Done()
		err := r.st.Err()
		v := r.emb.Vector()
		if err == nil && v == nil {
			err = fmt.Errorf("%w: input %d ended without an embedding (%v)", ErrModel, i, r.st.Timeline().Finish)
		}
		if err != nil {
			errs = append(errs, public(err))
			cancel()
			continue
		}
		vecs[i] = v
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return vecs, nil
}

// normalize scales v to unit L2 norm (a zero vector stays zero).
func normalize(v []float32) {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if ss == 0 {
		return
	}
	inv := 1 / math.Sqrt(ss)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
}

// embedModel is how a one-shot model gives embeddings: its token inputs
// and the output the vectors come from.
type embedModel struct {
	output string // sentence_embedding (pooled) or last_hidden_state
	pooled bool
	hidden string // last_hidden_state beside a pooled output, or ""
	inputs []string
}

// oneshotEmbedding recognises a sentence-embedding export (Hugging Face's
// BERT-style models through Optimum or sentence-transformers): int64
// inputs among input_ids (required), attention_mask and token_type_ids,
// and an output sentence_embedding [batch, D] or last_hidden_state
// [batch, seq, D]. It returns nil, 0 for any other model.
func oneshotEmbedding(ins, outs []ort.ValueInfo) (*embedModel, int) {
	em := &embedModel{}
	hasIDs := false
	for _, in := range ins {
		switch in.Name {
		case "input_ids", "attention_mask", "token_type_ids":
		default:
			return nil, 0
		}
		if in.DType != ort.Int64 || len(in.Shape) != 2 {
			return nil, 0
		}
		hasIDs = hasIDs || in.Name == "input_ids"
		em.inputs = append(em.inputs, in.Name)
	}
	dims := 0
	for _, o := range outs {
		if o.DType != ort.Float32 || len(o.Shape) == 0 || o.Shape[len(o.Shape)-1] <= 0 {
			continue
		}
		d := int(o.Shape[len(o.Shape)-1])
		switch {
		case o.Name == "sentence_embedding" && len(o.Shape) == 2:
			em.output, em.pooled, dims = o.Name, true, d
		case o.Name == "last_hidden_state" && len(o.Shape) == 3:
			em.hidden = o.Name
			if !em.pooled {
				em.output, dims = o.Name, d
			}
		}
	}
	if !hasIDs || em.output == "" {
		return nil, 0
	}
	if em.hidden == em.output {
		em.hidden = ""
	}
	return em, dims
}

// embedOneshot runs each input as an Infer request of its own (inputs of
// one length queued together run as one batch) and pools the outputs.
func (e *Engine) embedOneshot(ctx context.Context, m *model, ids [][]int32, opts EmbedOptions) ([][]float32, error) {
	em := m.emb
	output, pooled := em.output, em.pooled
	if pooled && opts.Pooling != PoolDefault {
		if em.hidden == "" {
			return nil, fmt.Errorf("%w: pooling %v: %s returns pooled vectors only (sentence_embedding)", ErrInvalidRequest, opts.Pooling, m.name)
		}
		output, pooled = em.hidden, false
	}
	vecs := make([][]float32, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, p := range ids {
		wg.Go(func() { vecs[i], errs[i] = e.embedOne(ctx, m, p, output, pooled, opts) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return vecs, nil
}

func (e *Engine) embedOne(ctx context.Context, m *model, p []int32, output string, pooled bool, opts EmbedOptions) ([]float32, error) {
	T := len(p)
	in := tensors{}
	defer func() { _ = ort.CloseAll(in) }()
	for _, name := range m.emb.inputs {
		data := make([]int64, T)
		for j := range data {
			switch name {
			case "input_ids":
				data[j] = int64(p[j])
			case "attention_mask":
				data[j] = 1
			}
		}
		t, err := ort.CopyTensor([]int64{1, int64(T)}, data)
		if err != nil {
			return nil, err
		}
		in[name] = t
	}
	m.begin(nil)
	res, err := e.s.Infer(ctx, sched.InferRequest[tensors]{
		Model: m.key, Class: opts.Class.sched(), Input: in, SLO: sched.SLO(opts.SLO), FailFast: opts.FailFast, LoadTime: m.takeLoad(),
	})
	m.end()
	if err != nil {
		return nil, public(err)
	}
	defer func() { _ = ort.CloseAll(res.Output) }()
	t := res.Output[output]
	if t == nil {
		return nil, fmt.Errorf("%w: %s returned no %s", ErrModel, m.name, output)
	}
	x, err := ort.Data[float32](t)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrModel, output, err)
	}
	D := m.info.Embeddings
	if pooled {
		if len(x) != D {
			return nil, fmt.Errorf("%w: %s has %d values, want %d", ErrModel, output, len(x), D)
		}
		return append([]float32(nil), x...), nil
	}
	if len(x) != T*D {
		return nil, fmt.Errorf("%w: %s has %d values, want %d×%d", ErrModel, output, len(x), T, D)
	}
	return poolRows(x, T, D, opts.Pooling), nil
}

// poolRows pools T rows of D hidden values.
func poolRows(x []float32, T, D int, p Pooling) []float32 {
	v := make([]float32, D)
	switch p {
	case PoolFirst:
		copy(v, x[:D])
	case PoolLast:
		copy(v, x[(T-1)*D:])
	default:
		sum := make([]float64, D)
		for t := range T {
			for i, y := range x[t*D : (t+1)*D] {
				sum[i] += float64(y)
			}
		}
		for i, s := range sum {
			v[i] = float32(s / float64(T))
		}
	}
	return v
}
