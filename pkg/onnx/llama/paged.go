package llama

import (
	"math"
	"strconv"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// pagedInputs declares the paged contract's step inputs and builds the
// masks every layer shares; it returns the position input.
func (d *decoder) pagedInputs() string {
	b, c := d.b, d.c
	i64 := onnx.TensorProto_INT64
	pos := b.Input("position_ids", i64, onnx.Sym("batch"), onnx.Sym("seq"))
	d.blockTables = b.Input("block_tables", i64, onnx.Sym("batch"), onnx.Sym("max_blocks"))
	d.contextLens = b.Input("context_lens", i64, onnx.Sym("batch"))
	if d.opts.writesPools() {
		d.slots = b.Input("slots", i64, onnx.Sym("batch"), onnx.Sym("seq"))
	}
	if !d.opts.AllLogits {
		b.Input("last_index", i64, onnx.Sym("batch"))
	}
	poolType := d.opts.poolType()
	for i := range c.NumHiddenLayers {
		for _, name := range []string{"key_cache.", "value_cache."} {
			b.Input(name+strconv.Itoa(i), poolType,
				onnx.Fixed(int64(c.NumKeyValueHeads)), onnx.Sym("num_blocks"),
				onnx.Fixed(int64(d.opts.BlockSize)), onnx.Fixed(int64(c.HeadDim)))
		}
		if d.opts.KVInt8 {
			for _, name := range []string{"key_scale.", "value_scale."} {
				b.Input(name+strconv.Itoa(i), onnx.TensorProto_FLOAT,
					onnx.Fixed(int64(c.NumKeyValueHeads)), onnx.Sym("num_blocks"))
			}
		}
	}

	if !d.opts.PortableAttention {
		return pos // the kernel masks by context_lens itself
	}

	// L = max_blocks·blockSize cached slots visible to each row, T new tokens.
	mb := b.Op("Slice", []string{b.Op("Shape", []string{d.blockTables}), b.Ints(1), b.Ints(2)})
	l1 := b.Op("Mul", []string{mb, b.Ints(int64(d.opts.BlockSize))})
	t1 := b.Op("Slice", []string{b.Op("Shape", []string{"input_ids"}), b.Ints(1), b.Ints(2)})
	d.splitLT = b.Op("Concat", []string{l1, t1}, onnx.AttrInt("axis", 0))
	zero, neg := b.Scalar(0), b.Scalar(negInf)

	// Past mask [1, B, 1, L]: slot j of row b is visible iff j < context_lens[b].
	slots := b.Op("Range", []string{b.ScalarInt(0), b.Op("Squeeze", []string{l1, b.Ints(0)}), b.ScalarInt(1)})
	visible := b.Op("Less", []string{slots, b.Op("Unsqueeze", []string{d.contextLens, b.Ints(1)})})
	d.maskPast = b.Op("Unsqueeze", []string{b.Op("Where", []string{visible, zero, neg}), b.Ints(0, 2)})

	// New-token mask [1, 1, G·T, T]: causal, tiled over the G query heads
	// of a KV group (query rows are ordered group-major, token-minor).
	tok := b.Op("Range", []string{b.ScalarInt(0), b.Op("Squeeze", []string{t1, b.Ints(0)}), b.ScalarInt(1)})
	causal := b.Op("LessOrEqual", []string{tok, b.Op("Unsqueeze", []string{tok, b.Ints(1)})})
	group := int64(c.NumAttentionHeads / c.NumKeyValueHeads)
	tiled := b.Op("Tile", []string{b.Op("Where", []string{causal, zero, neg}), b.Ints(group, 1)})
	d.maskNew = b.Op("Unsqueeze", []string{tiled, b.Ints(0, 1)})
	return pos
}

// fusedAttention emits attention over the pooled cache and the step's own
// tokens from the stacked q/k/v projection qkv, returning [B,T,Hq·D]. By
// default (not PortableAttention) that is one node,
// ai.edgeinfer.PagedAttention's fused form: it splits qkv, rotates q and
// k, reads the pool through the block table in place
// (runtime/ort/paged_attention.c) and writes the step's keys and values
// into the pools at slots — or, for int8 pools and CallerScatters, into
// the outputs new_keys.i / new_values.i, head-major, for the caller to
// scatter — in place of Split, two RotaryEmbedding, two Reshape, two
// Transpose and the attention subgraph.
func (d *decoder) fusedAttention(i int, qkv, pos string) string {
	b, c := d.b, d.c
	hkv, hd := int64(c.NumKeyValueHeads), int64(c.HeadDim)
	li := strconv.Itoa(i)
	heads := []*onnx.AttributeProto{onnx.AttrInt("num_heads", int64(c.NumAttentionHeads)), onnx.AttrInt("kv_num_heads", hkv)}
	scaleK, scaleV := "", "" // absent for float32 pools
	if d.opts.KVInt8 {
		scaleK, scaleV = "key_scale."+li, "value_scale."+li
	}
	in := []string{qkv, "", "", "key_cache." + li, "value_cache." + li, d.blockTables, d.contextLens, scaleK, scaleV, pos, d.cos, d.sin}
	if d.opts.writesPools() {
		return b.Node(onnx.DomainEdgeInfer, "PagedAttention", append(in, d.slots), []string{""}, heads...)[0]
	}
	for _, name := range []string{"new_keys.", "new_values."} {
		b.Output(name+li, onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Fixed(hkv), onnx.Sym("seq"), onnx.Fixed(hd))
	}
	return b.Node(onnx.DomainEdgeInfer, "PagedAttention", in, []string{"", "new_keys." + li, "new_values." + li}, heads...)[0]
}

// pagedAttention is the paged contract from standard and com.microsoft
// operators (Options.PortableAttention) for the rotated q and k and v: the
// step's new_keys/new_values head-major, then portableAttention.
func (d *decoder) pagedAttention(i int, q, k, v string) string {
	b, c := d.b, d.c
	hkv, hd := int64(c.NumKeyValueHeads), int64(c.HeadDim)
	li := strconv.Itoa(i)
	split := b.Ints(0, 0, hkv, hd)
	k4 := b.Op("Reshape", []string{k, split}) // [B,T,Hkv,D]
	v4 := b.Op("Reshape", []string{v, split})
	for _, kv := range [][2]string{{k4, "new_keys."}, {v4, "new_values."}} {
		b.Node(onnx.DomainONNX, "Transpose", []string{kv[0]}, []string{kv[1] + li}, onnx.AttrInts("perm", 0, 2, 1, 3))
		b.Output(kv[1]+li, onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Fixed(hkv), onnx.Sym("seq"), onnx.Fixed(hd))
	}
	return d.portableAttention(li, q, k4, v4)
}

// portableAttention is pagedAttention from standard and com.microsoft
// operators (Options.PortableAttention), for q [B,T,Hq·D] and the step's
// k4, v4 [B,T,Hkv,D].
//
// The cache is read by gathering each row's blocks from the head-major pool
// — Gather(pool [Hkv,N,bs,D], block_tables [B,M], axis 1) is
// [Hkv,B,M,bs,D], reshaped for free to [Hkv,B,M·bs,D] — and scored
// separately from the new keys, so the cache is never concatenated. GQA
// groups the G = Hq/Hkv query heads of a KV head into the rows of one
// matrix [Hkv, B, G·T, D] instead of repeating K and V.
func (d *decoder) portableAttention(li, q, k4, v4 string) string {
	b, c := d.b, d.c
	hkv, hd := int64(c.NumKeyValueHeads), int64(c.HeadDim)
	group := int64(c.NumAttentionHeads) / hkv
	kvShape := b.Ints(hkv, 0, -1, hd)

	pastK := b.Op("Reshape", []string{d.gatherPool("key", li), kvShape})
	pastV := b.Op("Reshape", []string{d.gatherPool("value", li), kvShape})
	var scaleK, scaleV string // int8 pools: per-slot scales [Hkv,B,1,M·bs]
	if d.opts.KVInt8 {
		scaleK, scaleV = d.slotScales("key", li), d.slotScales("value", li)
	}

	newK := b.Op("Transpose", []string{k4}, onnx.AttrInts("perm", 2, 0, 1, 3)) // [Hkv,B,T,D]
	newV := b.Op("Transpose", []string{v4}, onnx.AttrInts("perm", 2, 0, 1, 3))

	q5 := b.Op("Reshape", []string{q, b.Ints(0, 0, hkv, group, hd)})            // [B,T,Hkv,G,D]
	qT := b.Op("Transpose", []string{q5}, onnx.AttrInts("perm", 2, 0, 3, 1, 4)) // [Hkv,B,G,T,D]
	qg := b.Op("Reshape", []string{qT, kvShape})                                // [Hkv,B,G·T,D]

	alpha := onnx.AttrFloat("alpha", float32(1/math.Sqrt(float64(hd))))
	transB := onnx.AttrInt("transB", 1)
	scores := b.MS("FusedMatMul", []string{qg, pastK}, alpha, transB)
	if scaleK != "" {
		scores = b.Op("Mul", []string{scores, scaleK})
	}
	sPast := b.Op("Add", []string{scores, d.maskPast})
	sNew := b.Op("Add", []string{b.MS("FusedMatMul", []string{qg, newK}, alpha, transB), d.maskNew})
	probs := b.Op("Softmax", []string{b.Op("Concat", []string{sPast, sNew}, onnx.AttrInt("axis", -1))}, onnx.AttrInt("axis", -1))
	parts := b.Node(onnx.DomainONNX, "Split", []string{probs, d.splitLT}, []string{"", ""}, onnx.AttrInt("axis", -1))
	pPast := parts[0]
	if scaleV != "" {
		pPast = b.Op("Mul", []string{pPast, scaleV})
	}
	o := b.Op("Add", []string{
		b.Op("MatMul", []string{pPast, pastV}),
		b.Op("MatMul", []string{parts[1], newV}),
	}) // [Hkv,B,G·T,D]
	o = b.Op("Reshape", []string{o, b.Ints(hkv, 0, group, -1, hd)})          // [Hkv,B,G,T,D]
	o = b.Op("Transpose", []string{o}, onnx.AttrInts("perm", 1, 3, 0, 2, 4)) // [B,T,Hkv,G,D]
	return b.Op("Reshape", []string{o, b.Ints(0, 0, int64(c.NumAttentionHeads)*hd)})
}

// gatherPool gathers layer li's key or value blocks of every row,
// [Hkv,B,M,bs,D], cast to float32 when the pool is int8 or float16.
func (d *decoder) gatherPool(kind, li string) string {
	b := d.b
	blocks := b.Op("Gather", []string{kind + "_cache." + li, d.blockTables}, onnx.AttrInt("axis", 1))
	if d.opts.poolType() == onnx.TensorProto_FLOAT {
		return blocks
	}
	return b.Op("Cast", []string{blocks}, onnx.AttrInt("to", int64(onnx.TensorProto_FLOAT)))
}

// slotScales gathers layer li's int8 scales [Hkv,N] with the block table
// and repeats each over its block's slots: [Hkv,B,1,M·bs]. The graph does
// not multiply them into the gathered keys and values (D values per slot):
// as q·(s·k) = s·(q·k) and p·(s·v) = (p·s)·v, it scales the past scores
// and the past probabilities instead, G·T values per slot — for decode a
// few instead of head_dim.
func (d *decoder) slotScales(kind, li string) string {
	b := d.b
	s := b.Op("Gather", []string{kind + "_scale." + li, d.blockTables}, onnx.AttrInt("axis", 1)) // [Hkv,B,M]
	s = b.Op("Unsqueeze", []string{s, b.Ints(3)})
	s = b.Op("Expand", []string{s, b.Ints(1, 1, 1, int64(d.opts.BlockSize))}) // [Hkv,B,M,bs]
	return b.Op("Reshape", []string{s, b.Ints(int64(d.c.NumKeyValueHeads), 0, 1, -1)})
}
