package llm

import (
	"context"
	"fmt"
	"strconv"

	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// The compatible contract (Hugging Face Optimum / onnxruntime-genai names):
//
//	input_ids [B,T], attention_mask [B, P+T], position_ids [B,T] (optional),
//	past_key_values.{i}.key/value [B, kvH, P, D]
//	→ logits [B, T, V], present.{i}.key/value [B, kvH, P+T, D]
//
// The executor keeps the same paged cache as for paged graphs, so
// scheduling, prefix sharing and preemption work unchanged; each step it
// gathers every row's pages into a right-padded past (P = the longest
// context of the batch), and takes the step's new keys and values back out
// of present. Rows are right-padded as GroupQueryAttention expects: row b's
// mask is ones for its ctx_b + T tokens, then zeros, and its new keys sit at
// [ctx_b, ctx_b+T) of present. The gather and the present copy cost memory
// traffic the paged graph avoids: that is the price of running any export.

func (m *Model) checkCompatSignature() error {
	need := map[string]bool{"input_ids": true, "attention_mask": true}
	opt := map[string]bool{"position_ids": true}
	for l := range m.geom.Layers {
		need["past_key_values."+strconv.Itoa(l)+".key"] = true
		need["past_key_values."+strconv.Itoa(l)+".value"] = true
	}
	for _, in := range m.sess.Inputs() {
		switch {
		case need[in.Name]:
			delete(need, in.Name)
		case opt[in.Name]:
			m.hasPositions = true
		default:
			return fmt.Errorf("%w: unexpected input %q in %s (compatible contract)", ErrContract, in.Name, m.b.ModelPath())
		}
		if len(in.Name) > 16 && in.Name[:16] == "past_key_values." && in.DType != ort.Float32 {
			return fmt.Errorf("%w: %s is %s; the compatible executor runs float32 caches", ErrContract, in.Name, in.DType)
		}
	}
	for name := range need {
		return fmt.Errorf("%w: %s lacks input %q of the compatible contract", ErrContract, m.b.ModelPath(), name)
	}
	return nil
}

// runCompat runs one step of B rows × T tokens through a compatible graph.
// The caller has filled io.ids, io.pos (B·T) and io.last (B) and the slots.
func (m *Model) runCompat(ctx context.Context, seqs []*kvcache.Sequence, T int) error {
	g, io := m.geom, m.io
	B, H, D := len(seqs), g.KVHeads, g.HeadDim
	bs := m.cache.BlockSize()
	ctxs := make([]int, B)
	P := 0
	for b, s := range seqs {
		ctxs[b] = s.Computed()
		P = max(P, ctxs[b])
	}
	in := map[string]*ort.Tensor{}
	defer func() { _ = ort.CloseAll(in) }()
	add := func(name string) func(*ort.Tensor, error) error {
		return func(t *ort.Tensor, err error) error {
			if err != nil {
				return fmt.Errorf("llm: %s: %w", name, err)
			}
			in[name] = t
			return nil
		}
	}
	ids := append([]int64(nil), int64s(io.ids, B*T)...)
	if err := add("input_ids")(ort.NewTensor([]int64{int64(B), int64(T)}, ids)); err != nil {
		return err
	}
	mask := make([]int64, B*(P+T))
	for b := range B {
		for j := range ctxs[b] + T {
			mask[b*(P+T)+j] = 1
		}
	}
	if err := add("attention_mask")(ort.NewTensor([]int64{int64(B), int64(P + T)}, mask)); err != nil {
		return err
	}
	if m.hasPositions {
		pos := append([]int64(nil), int64s(io.pos, B*T)...)
		if err := add("position_ids")(ort.NewTensor([]int64{int64(B), int64(T)}, pos)); err != nil {
			return err
		}
	}
	tables := make([][]int64, B)
	for b, s := range seqs {
		var err error
		if tables[b], err = s.BlockTable(nil, max(s.NumBlocks(), 1)); err != nil {
			return fmt.Errorf("llm: block table: %w", err)
		}
	}
	shape := []int64{int64(B), int64(H), int64(P), int64(D)}
	for l := range g.Layers {
		li := strconv.Itoa(l)
		for _, kv := range []struct {
			name string
			pool []float32
		}{{"past_key_values." + li + ".key", m.cache.KeyPool(l)}, {"past_key_values." + li + ".value", m.cache.ValuePool(l)}} {
			past := make([]float32, B*H*P*D)
			for b := range B {
				for h := range H {
					dst := (b*H + h) * P * D
					for p := range ctxs[b] {
						slot := tables[b][p/bs]*int64(bs) + int64(p%bs)
						off := m.cache.SlotOffset(h, slot)
						copy(past[dst+p*D:dst+(p+1)*D], kv.pool[off:off+D])
					}
				}
			}
			if err := add(kv.name)(ort.NewTensor(shape, past)); err != nil {
				return err
			}
		}
	}
	out, err := m.sess.Run(ctx, in)
	if err != nil {
		return fmt.Errorf("llm: run %s %d×%d: %w", m.name, B, T, err)
	}
	defer func() { _ = ort.CloseAll(out) }()
	V := g.Vocab
	logits, err := ort.Data[float32](out["logits"])
	if err != nil || len(logits) != B*T*V {
		return fmt.Errorf("%w: logits of %d values, want %d×%d×%d (%v)", ErrContract, len(logits), B, T, V, err)
	}
	dst := float32s(io.logits, B*V)
	last := int64s(io.last, B)
	for b := range B {
		src := (b*T + int(last[b])) * V
		copy(dst[b*V:(b+1)*V], logits[src:src+V])
	}
	n := B * H * T * D
	for l := range g.Layers {
		li := strconv.Itoa(l)
		io.newKs[l] = float32s(io.newK[l], n)
		io.newVs[l] = float32s(io.newV[l], n)
		for _, kv := range []struct {
			name string
			dst  []float32
		}{{"present." + li + ".key", io.newKs[l]}, {"present." + li + ".value", io.newVs[l]}} {
			pres, err := ort.Data[float32](out[kv.name])
			if err != nil || len(pres) != B*H*(P+T)*D {
				return fmt.Errorf("%w: %s has %d values, want %d (%v)", ErrContract, kv.name, len(pres), B*H*(P+T)*D, err)
			}
			for b := range B {
				for h := range H {
					src := ((b*H+h)*(P+T) + ctxs[b]) * D
					copy(kv.dst[(b*H+h)*T*D:(b*H+h+1)*T*D], pres[src:src+T*D])
				}
			}
		}
	}
	return m.commit(seqs, B, T)
}
