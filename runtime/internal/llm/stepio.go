package llm

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// stepIO owns the per-step input and output memory of a paged decoder: one
// off-heap buffer per tensor, sized for the largest step, and a cache of
// Bindings keyed by step shape. A decode loop repeats the same (B, T, M)
// shape for many steps, so after the first step of a shape a Run validates
// nothing and allocates nothing.
type stepIO struct {
	m                        *Model
	maxTokens, maxRows, maxM int

	ids, pos, tables, ctxLens, last *ort.Buffer
	logits                          *ort.Buffer
	// slotsIn is the graph's input slots [B, T] where it writes the pools
	// (Model.writesKV); newK and newV its outputs new_keys / new_values
	// where the step scatters them instead.
	slotsIn    *ort.Buffer
	newK, newV []*ort.Buffer
	// hidden is the graph's hidden_states output [B, T, hiddenSize], when
	// it has one (embeddings pool it); nil otherwise.
	hidden     *ort.Buffer
	hiddenSize int
	// greedy is the graph's outputGreedy [B], when it has one: each row's
	// argmax of its logits, found by the head as it wrote them.
	greedy *ort.Buffer

	bound map[stepShape]*boundStep

	// scratch reused every step
	slots        []int64
	newKs, newVs [][]float32
}

// outputGreedy is pkg/onnx/llama's OutputGreedy (TestGreedyOutputName):
// the graph output of each row's argmax, on the kernel's graphs.
const outputGreedy = "greedy_token"

type stepShape struct{ b, t, m int }

type boundStep struct {
	bind    *ort.Binding
	tensors []*ort.Tensor
}

// maxBoundShapes caps the binding cache; past it the cache is emptied
// (shapes of a long run are few: T is 1 for decode, M grows slowly).
const maxBoundShapes = 64

func newStepIO(m *Model) (*stepIO, error) {
	g := m.geom
	io := &stepIO{
		m:         m,
		maxRows:   m.opts.MaxBatch,
		maxTokens: max(m.opts.MaxBatch, m.opts.MaxChunk),
		maxM:      (g.MaxPositions + g.BlockSize - 1) / g.BlockSize,
		bound:     map[stepShape]*boundStep{},
	}
	var err error
	alloc := func(n, elem int) *ort.Buffer {
		if err != nil {
			return nil
		}
		var b *ort.Buffer
		b, err = ort.NewBuffer(max(n*elem, 8))
		return b
	}
	io.ids = alloc(io.maxTokens, 8)
	io.pos = alloc(io.maxTokens, 8)
	io.tables = alloc(io.maxRows*io.maxM, 8)
	io.ctxLens = alloc(io.maxRows, 8)
	io.last = alloc(io.maxRows, 8)
	io.logits = alloc(io.maxRows*g.Vocab, 4)
	if m.writesKV {
		io.slotsIn = alloc(io.maxTokens, 8)
	} else {
		for range g.Layers {
			io.newK = append(io.newK, alloc(io.maxTokens*g.KVHeads*g.HeadDim, 4))
			io.newV = append(io.newV, alloc(io.maxTokens*g.KVHeads*g.HeadDim, 4))
		}
	}
	if !m.compat {
		for _, o := range m.sess.Outputs() {
			if o.Name == outputGreedy {
				io.greedy = alloc(io.maxRows, 8)
			}
			if o.Name == "hidden_states" {
				io.hiddenSize = g.Hidden
				if len(o.Shape) == 3 && o.Shape[2] > 0 {
					io.hiddenSize = int(o.Shape[2])
				}
				io.hidden = alloc(io.maxTokens*io.hiddenSize, 4)
			}
		}
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("llm: step buffers: %w", err), io.close())
	}
	io.newKs = make([][]float32, g.Layers)
	io.newVs = make([][]float32, g.Layers)
	return io, nil
}

// int64s and float32s view a buffer's first n elements.
func int64s(b *ort.Buffer, n int) []int64 {
	v, _ := ort.View[int64](b, 0, n)
	return v
}

func float32s(b *ort.Buffer, n int) []float32 {
	v, _ := ort.View[float32](b, 0, n)
	return v
}

// run executes the graph for B rows of T tokens with M block-table columns;
// the caller has filled the first B·T ids/positions, B·M tables and B
// context lengths and last indices.
func (io *stepIO) run(ctx context.Context, b, t, m int) error {
	if b > io.maxRows || b*t > io.maxTokens || m > io.maxM {
		return fmt.Errorf("%w: step of %d×%d tokens with %d blocks exceeds the buffers (%d rows, %d tokens, %d blocks)", ErrBatch, b, t, m, io.maxRows, io.maxTokens, io.maxM)
	}
	key := stepShape{b, t, m}
	bs, ok := io.bound[key]
	if !ok {
		if len(io.bound) >= maxBoundShapes {
			io.unbindAll()
		}
		var err error
		if bs, err = io.bind(key); err != nil {
			return err
		}
		io.bound[key] = bs
	}
	return bs.bind.Run(ctx)
}

func (io *stepIO) bind(k stepShape) (*boundStep, error) {
	g := io.m.geom
	bs := &boundStep{}
	wrap := func(dt ort.DType, shape []int64, buf *ort.Buffer) *ort.Tensor {
		t, err := ort.WrapBuffer(dt, shape, buf, 0)
		if err != nil {
			return nil
		}
		bs.tensors = append(bs.tensors, t)
		return t
	}
	B, T, M := int64(k.b), int64(k.t), int64(k.m)
	in := map[string]*ort.Tensor{
		"input_ids":    wrap(ort.Int64, []int64{B, T}, io.ids),
		"position_ids": wrap(ort.Int64, []int64{B, T}, io.pos),
		"block_tables": wrap(ort.Int64, []int64{B, M}, io.tables),
		"context_lens": wrap(ort.Int64, []int64{B}, io.ctxLens),
		"last_index":   wrap(ort.Int64, []int64{B}, io.last),
	}
	out := map[string]*ort.Tensor{"logits": wrap(ort.Float32, []int64{B, int64(g.Vocab)}, io.logits)}
	if io.hidden != nil {
		out["hidden_states"] = wrap(ort.Float32, []int64{B, T, int64(io.hiddenSize)}, io.hidden)
	}
	if io.greedy != nil {
		out[outputGreedy] = wrap(ort.Int64, []int64{B}, io.greedy)
	}
	if io.slotsIn != nil {
		in["slots"] = wrap(ort.Int64, []int64{B, T}, io.slotsIn)
	}
	kv := []int64{B, int64(g.KVHeads), T, int64(g.HeadDim)}
	for l := range g.Layers {
		s := strconv.Itoa(l)
		in["key_cache."+s] = io.m.pools[2*l]
		in["value_cache."+s] = io.m.pools[2*l+1]
		if io.m.scales != nil {
			in["key_scale."+s] = io.m.scales[2*l]
			in["value_scale."+s] = io.m.scales[2*l+1]
		}
		if io.slotsIn == nil {
			out["new_keys."+s] = wrap(ort.Float32, kv, io.newK[l])
			out["new_values."+s] = wrap(ort.Float32, kv, io.newV[l])
		}
	}
	for _, t := range bs.tensors {
		if t == nil {
			return nil, errors.Join(fmt.Errorf("llm: wrap step tensors for %d×%d", k.b, k.t), bs.close())
		}
	}
	var err error
	if bs.bind, err = io.m.sess.Bind(in, out); err != nil {
		return nil, errors.Join(fmt.Errorf("llm: bind step %d×%d: %w", k.b, k.t, err), bs.close())
	}
	return bs, nil
}

func (bs *boundStep) close() error {
	var errs []error
	for _, t := range bs.tensors {
		if t != nil {
			errs = append(errs, t.Close())
		}
	}
	return errors.Join(errs...)
}

func (io *stepIO) unbindAll() error {
	var errs []error
	for k, bs := range io.bound {
		errs = append(errs, bs.close())
		delete(io.bound, k)
	}
	return errors.Join(errs...)
}

func (io *stepIO) close() error {
	errs := []error{io.unbindAll()}
	for _, b := range append([]*ort.Buffer{io.ids, io.pos, io.tables, io.ctxLens, io.last, io.logits, io.hidden, io.greedy, io.slotsIn}, append(io.newK, io.newV...)...) {
		if b != nil {
			errs = append(errs, b.Close())
		}
	}
	return errors.Join(errs...)
}
