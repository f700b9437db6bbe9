package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// Options configures a decoder model's executor. It is plain data; the zero
// value is usable: ONNX Runtime's default session options, a 256 MiB KV cache
// of fp32 pages, and the graph's block size.
type Options struct {
	// Session is passed to ONNX Runtime (threads, providers, …).
	Session ort.Options `json:"session"`
	// KV configures the KV cache; a zero budget means 256 MiB.
	KV kvcache.Options `json:"kv"`
	// MaxBatch and MaxChunk size the per-step buffers: at most MaxBatch
	// decode rows and prefill chunks of at most MaxChunk tokens. Zero means
	// 8 and 512.
	MaxBatch int `json:"max_batch,omitempty"`
	MaxChunk int `json:"max_chunk,omitempty"`
	// Persist keeps the prefix cache across restarts (persist.go); a zero
	// Path turns it off.
	Persist PersistOptions `json:"persist"`
	// Logger receives debug records; nil discards.
	Logger *slog.Logger `json:"-"`
}

const defaultKVBudget = 256 << 20

// defaultCompatPositions bounds an exported decoder whose context length
// its files do not state.
const defaultCompatPositions = 2048

func (o Options) withDefaults() Options {
	if o.KV.BudgetBytes == 0 {
		o.KV.BudgetBytes = defaultKVBudget
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 8
	}
	if o.MaxChunk == 0 {
		o.MaxChunk = 512
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports options out of range.
func (o Options) Validate() error {
	if o.KV.BudgetBytes < 0 || o.MaxBatch < 0 || o.MaxChunk < 0 {
		return fmt.Errorf("%w: negative kv budget, max batch or max chunk", ErrBatch)
	}
	return o.Session.Validate()
}

// Model is a loaded decoder in the paged contract: its ONNX Runtime session,
// its KV cache, and the per-step tensors that wrap off-heap buffers.
//
// Load and Close may be called from any goroutine; everything else (Admit,
// Extend, Release, Step) belongs to one goroutine, the scheduler's device
// loop, like the KV cache it drives. Stats-like reads go through Cache().Stats.
type Model struct {
	name   string
	b      *bundle.Bundle
	geom   bundle.Geometry
	gen    bundle.Generation
	opts   Options
	sess   *ort.Session
	cache  *kvcache.Cache
	pools  []*ort.Tensor // key_cache.i, value_cache.i: the cache's mmap pools, wrapped once
	scales []*ort.Tensor // key_scale.i, value_scale.i of int8 pages (nil for float32)
	io     *stepIO
	seqs   map[uint64]*seqState
	eos    map[int32]bool
	compat bool // the compatible (Optimum) contract: past gathered per step
	// writesKV: the graph writes each step's keys and values into the pools
	// itself (its input slots, pkg/onnx/llama's "Who writes the pools"), so
	// the step does not scatter them; graphs built before, and int8 pools,
	// return them for Cache.Scatter.
	writesKV     bool
	hasPositions bool   // compatible graph takes position_ids
	ownIDs       uint64 // Generate/Score sequence ids
	persist      persister
	closed       bool
	phases       phaseCounters // decode steps' time by phase (Phases)
}

// Load opens a decoder bundle: it creates the ONNX Runtime session over the
// provider chain, allocates the KV cache and wraps its pools.
func Load(ctx context.Context, b *bundle.Bundle, opts Options) (*Model, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	m := &b.Manifest
	if m.Kind != bundle.KindDecoder || m.Geometry == nil {
		return nil, fmt.Errorf("%w: bundle %s is %q, not a decoder with a geometry", ErrContract, b.Dir, m.Kind)
	}
	g := *m.Geometry
	compat := false
	switch m.Contract {
	case bundle.ContractPaged:
		if g.Logits != "last" || g.BlockSize <= 0 {
			return nil, fmt.Errorf("%w: paged bundle %s needs logits \"last\" and a block size (got %q, %d)", ErrContract, b.Dir, g.Logits, g.BlockSize)
		}
	case bundle.ContractCompatible:
		// The compatible executor keeps the same paged cache in Go and
		// gathers each step's past from it; the block size is ours to pick.
		compat = true
		if g.BlockSize <= 0 {
			g.BlockSize = kvcache.DefaultBlockSize
		}
		if g.MaxPositions <= 0 {
			g.MaxPositions = defaultCompatPositions
		}
	default:
		return nil, fmt.Errorf("%w: bundle %s has contract %q; want %q or %q", ErrContract, b.Dir, m.Contract, bundle.ContractPaged, bundle.ContractCompatible)
	}
	sess, err := ort.NewSessionFromFile(ctx, b.ModelPath(), opts.Session)
	if err != nil {
		return nil, fmt.Errorf("llm: load %s: %w", m.Name, err)
	}
	mod := &Model{name: m.Name, b: b, geom: g, opts: opts, sess: sess, compat: compat, seqs: map[uint64]*seqState{}, eos: map[int32]bool{}}
	mod.phases.byRows = make([]rowCounters, opts.MaxBatch+1)
	if m.Generation != nil {
		mod.gen = *m.Generation
		for _, id := range m.Generation.EOSTokenIDs {
			mod.eos[int32(id)] = true
		}
	}
	if err := mod.checkSignature(); err != nil {
		return nil, errors.Join(err, sess.Close())
	}
	mod.cache, err = kvcache.New(kvcache.Config{
		Layers: g.Layers, KVHeads: g.KVHeads, HeadDim: g.HeadDim, BlockSize: g.BlockSize, DType: kvDType(g),
		Options: opts.KV,
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("llm: kv cache for %s: %w", m.Name, err), sess.Close())
	}
	if err := mod.wrapPools(); err != nil {
		return nil, errors.Join(err, mod.Close())
	}
	if mod.io, err = newStepIO(mod); err != nil {
		return nil, errors.Join(err, mod.Close())
	}
	if err := mod.warmUp(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("llm: warm-up run of %s: %w", m.Name, err), mod.Close())
	}
	mod.persist.opts = opts.Persist
	mod.openPersisted()
	return mod, nil
}

// warmUp runs a short prompt and one decode step before the model serves:
// a session's first runs pay one-time costs (ONNX Runtime's allocations
// and kernel set-up, the first touch of the weights) that would otherwise
// land on the first request after every start, a restored prefix cache's
// included (runtime/serve/testdata/warm.sh measures that request). The
// prompt is shorter than a block, so nothing of it enters the prefix
// cache.
func (m *Model) warmUp(ctx context.Context) error {
	n := min(m.geom.BlockSize-1, 8, m.geom.MaxPositions-2)
	if n < 1 {
		return nil
	}
	prompt := make([]int32, n)
	for i := range prompt {
		prompt[i] = int32(i % max(m.geom.Vocab, 1))
	}
	for _, err := range m.Generate(ctx, prompt, GenerateOptions{MaxTokens: 2}) {
		if err != nil {
			return err
		}
	}
	m.cache.ResetCounters()
	return nil
}

// checkSignature verifies the session's inputs and outputs are the paged
// contract's, so a wrong model fails at load, not at the first step.
func (m *Model) checkSignature() error {
	if m.compat {
		return m.checkCompatSignature()
	}
	want := map[string]bool{"input_ids": true, "position_ids": true, "block_tables": true, "context_lens": true, "last_index": true}
	for l := range m.geom.Layers {
		want["key_cache."+strconv.Itoa(l)] = true
		want["value_cache."+strconv.Itoa(l)] = true
		if m.geom.KVInt8() {
			want["key_scale."+strconv.Itoa(l)] = true
			want["value_scale."+strconv.Itoa(l)] = true
		}
	}
	for _, in := range m.sess.Inputs() {
		if in.Name == "slots" {
			m.writesKV = true
			continue
		}
		if !want[in.Name] {
			return fmt.Errorf("%w: unexpected input %q in %s", ErrContract, in.Name, m.b.ModelPath())
		}
		if err := m.checkPoolDType(in.Name, in.DType); err != nil {
			return err
		}
		delete(want, in.Name)
	}
	for name := range want {
		return fmt.Errorf("%w: %s lacks input %q of the paged contract", ErrContract, m.b.ModelPath(), name)
	}
	if m.writesKV && m.geom.KVInt8() {
		return fmt.Errorf("%w: %s takes slots (its attention writes float pools itself), but the bundle says its KV pools are int8", ErrContract, m.b.ModelPath())
	}
	return nil
}

// Name is the model's name from its manifest.
func (m *Model) Name() string { return m.name }

// Bundle is the bundle the model was loaded from.
func (m *Model) Bundle() *bundle.Bundle { return m.b }

// Geometry is the decoder's shape.
func (m *Model) Geometry() bundle.Geometry { return m.geom }

// Generation holds the bundle's generation defaults.
func (m *Model) Generation() bundle.Generation { return m.gen }

// Session is the ONNX Runtime session (provider, attempts, load time).
func (m *Model) Session() *ort.Session { return m.sess }

// Cache is the model's KV cache; only its Stats may be read from other
// goroutines.
func (m *Model) Cache() *kvcache.Cache { return m.cache }

// IsEOS reports whether tok ends generation for this model.
func (m *Model) IsEOS(tok int32) bool { return m.eos[tok] }

// Close frees the session, the tensors and the cache. It is idempotent.
func (m *Model) Close() error {
	if m.closed {
		return nil
	}
	errs := []error{m.closePersist()}
	m.closed = true
	if m.io != nil {
		errs = append(errs, m.io.close())
	}
	for _, t := range append(m.pools, m.scales...) {
		errs = append(errs, t.Close())
	}
	if m.sess != nil {
		errs = append(errs, m.sess.Close())
	}
	if m.cache != nil {
		errs = append(errs, m.cache.Close())
	}
	return errors.Join(errs...)
}
