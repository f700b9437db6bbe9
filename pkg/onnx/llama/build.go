package llama

import (
	"fmt"
	"math"
	"strconv"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// Contract selects the decoder graph's inputs and outputs.
type Contract string

const (
	// ContractPaged reads the KV cache from head-major block pools; see
	// the package documentation for its exact inputs and outputs.
	ContractPaged Contract = "paged"
	// ContractCompatible uses Hugging Face Optimum's names:
	// past_key_values.{i}.key/value in, present.{i}.key/value out.
	ContractCompatible Contract = "compatible"
)

// MetadataAttention is the model metadata key that says how a paged graph
// computes attention: AttentionKernel or AttentionPortable.
const (
	MetadataAttention = "edgeinfer.attention"
	// AttentionKernel: one ai.edgeinfer.PagedAttention node per layer,
	// edgeinfer's kernel (runtime/ort registers it with every session).
	AttentionKernel = onnx.DomainEdgeInfer + ".PagedAttention"
	// AttentionPortable: standard and com.microsoft operators only
	// (Options.PortableAttention).
	AttentionPortable = "portable"
)

// DefaultBlockSize is the paged contract's tokens per KV block.
const DefaultBlockSize = 16

// Options configures Build. The zero value builds the paged contract with
// blocks of DefaultBlockSize, last-position logits and fp32 weights.
type Options struct {
	// Contract is ContractPaged (also "") or ContractCompatible.
	Contract Contract
	// BlockSize is the paged pool's tokens per block, fixed in the graph;
	// 0 means DefaultBlockSize.
	BlockSize int
	// AllLogits makes the paged graph return logits for every position
	// [B, T, vocab] instead of the position last_index selects [B, vocab]
	// (the last_index input then does not exist). The compatible graph
	// always returns every position, as Optimum exports do.
	AllLogits bool
	// MaxPositions is the size of the rotary tables; 0 means the config's
	// max_position_embeddings. Positions at or beyond it fail at run time.
	MaxPositions int
	// Emitter turns weights into nodes; nil means FP32Emitter.
	Emitter WeightEmitter
	// KVInt8 makes the paged graph read int8 pools: key_cache.{i} and
	// value_cache.{i} are int8 and the inputs key_scale.{i} /
	// value_scale.{i} float32 [kvH, N] hold one scale per (head, block),
	// as runtime/kvcache's int8 pages store them. Paged contract only.
	KVInt8 bool
	// KVFloat16 makes the paged graph read float16 pools (key_cache.{i}
	// and value_cache.{i} IEEE float16): half the KV memory and half the
	// bytes a decode step's attention reads, what llama.cpp keeps by
	// default. The step's new_keys/new_values stay float32 (the cache
	// rounds them on the way in). Paged contract only; not with KVInt8.
	KVFloat16 bool
	// PortableAttention builds the paged graph's attention from standard
	// ONNX and com.microsoft operators (Gather of the blocks, FusedMatMul,
	// Softmax, ...) instead of edgeinfer's ai.edgeinfer.PagedAttention
	// kernel, so it loads in any ONNX Runtime 1.30 — a vendor build or an
	// execution provider that should run the whole graph. It is slower on
	// the CPU (~25 nodes per layer instead of one, and a copy of every
	// cached key and value per step).
	PortableAttention bool
	// PortableMatMul keeps the int4 and int8 projections on
	// com.microsoft.MatMulNBits, which every ONNX Runtime build and
	// provider runs. By default those of block 32 without zero points (the
	// int4-b32 and int8 schemes') run on edgeinfer's ai.edgeinfer.MatMulNBits
	// kernel, faster on the CPU (runtime/engine's
	// BenchmarkDecodeRateMatMulKernel), with each MLP's gate/up projection
	// and SwiGLU as one node. Same initializers: SetMatMulKernel turns a
	// model built either way into the other.
	PortableMatMul bool
	// CallerScatters keeps the paged kernel graph's step keys and values as
	// outputs (new_keys.{i}, new_values.{i}) for the caller to scatter into
	// the pools, the one form before GraphRevision 11. By default a graph
	// on ai.edgeinfer.PagedAttention with float32 or float16 pools takes
	// the input slots [B, T] and writes them itself (the package doc's
	// "Who writes the pools"). Int8 pools and PortableAttention always
	// leave the writing to the caller.
	CallerScatters bool
	// HiddenStates adds the output hidden_states float32 [B, T, hidden]:
	// every position's final hidden state, after the last norm (the LM
	// head's input), from which runtime/engine pools embeddings. The
	// logits are then gathered from it instead of normalising the last
	// positions alone. Paged contract only.
	HiddenStates bool
}

func (o *Options) normalise(c *Config) error {
	switch o.Contract {
	case "":
		o.Contract = ContractPaged
	case ContractPaged, ContractCompatible:
	default:
		return fmt.Errorf("%w: contract %q (want paged or compatible)", ErrOptions, o.Contract)
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.BlockSize < 1 || o.BlockSize > 1<<16 {
		return fmt.Errorf("%w: block size %d", ErrOptions, o.BlockSize)
	}
	if o.MaxPositions == 0 {
		o.MaxPositions = c.MaxPositionEmbeddings
	}
	if o.MaxPositions < 1 || o.MaxPositions > 1<<22 {
		return fmt.Errorf("%w: max positions %d", ErrOptions, o.MaxPositions)
	}
	if o.Emitter == nil {
		o.Emitter = FP32Emitter{}
	}
	if o.KVInt8 && o.Contract != ContractPaged {
		return fmt.Errorf("%w: int8 KV pages need the paged contract", ErrOptions)
	}
	if o.KVFloat16 && o.Contract != ContractPaged {
		return fmt.Errorf("%w: float16 KV pools need the paged contract", ErrOptions)
	}
	if o.KVFloat16 && o.KVInt8 {
		return fmt.Errorf("%w: KV pools are float16 or int8, not both", ErrOptions)
	}
	if o.HiddenStates && o.Contract != ContractPaged {
		return fmt.Errorf("%w: the hidden_states output needs the paged contract", ErrOptions)
	}
	return nil
}

// negInf is the additive mask for excluded keys. The lowest finite float32
// rather than -Inf: adding it to any finite score stays finite or becomes
// -Inf, never NaN, and exp underflows to exactly 0.
const negInf = -math.MaxFloat32

// decoder carries the state of one Build.
type decoder struct {
	b    *onnx.Builder
	c    *Config
	src  WeightSource
	opts Options
	em   WeightEmitter

	cos, sin string
	// paged: shared per-step values
	blockTables, contextLens   string
	slots                      string // the paged kernel graph's input slots (Options.writesPools)
	maskPast, maskNew, splitLT string // portable attention only
	// compatible: shared per-step values
	seqlensK, totalLen string
}

// Build adds a decoder for config c with weights from src to b, which must
// be fresh (NewBuilder); call b.SetExternalData first for large models.
// It declares opsets, inputs, outputs and metadata.
func Build(b *onnx.Builder, c *Config, src WeightSource, opts Options) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := opts.normalise(c); err != nil {
		return err
	}
	d := &decoder{b: b, c: c, src: src, opts: opts, em: opts.Emitter}
	b.Opset(onnx.DomainMicrosoft, 1)
	b.Metadata("edgeinfer.contract", string(opts.Contract))
	b.Metadata("edgeinfer.architecture", c.Architecture())
	b.Metadata("edgeinfer.quantization", d.em.Scheme())
	if opts.Contract == ContractPaged {
		attention := AttentionPortable
		if !opts.PortableAttention {
			b.Opset(onnx.DomainEdgeInfer, 1)
			attention = AttentionKernel
		}
		b.Metadata(MetadataAttention, attention)
		b.Metadata("edgeinfer.block_size", strconv.Itoa(opts.BlockSize))
		b.Metadata("edgeinfer.kv_dtype", opts.kvDType())
	}
	if err := d.build(); err != nil || opts.PortableMatMul {
		return err
	}
	m, err := b.Model()
	if err != nil {
		return err
	}
	SetMatMulKernel(m, true)
	return nil
}

func (d *decoder) build() error {
	b, c := d.b, d.c
	ids := b.Input("input_ids", onnx.TensorProto_INT64, onnx.Sym("batch"), onnx.Sym("seq"))
	var pos string
	if d.opts.Contract == ContractPaged {
		pos = d.pagedInputs()
	} else {
		pos = d.compatibleInputs()
	}
	cos, sin := ropeCache(c, d.opts.MaxPositions)
	half := int64(c.HeadDim / 2)
	d.cos = b.Float32("rope.cos", []int64{int64(d.opts.MaxPositions), half}, cos)
	d.sin = b.Float32("rope.sin", []int64{int64(d.opts.MaxPositions), half}, sin)

	embed, err := fetch(d.src, "model.embed_tokens.weight", c.VocabSize, c.HiddenSize)
	if err != nil {
		return err
	}
	x, err := d.em.Embedding(b, "model.embed_tokens", ids, embed)
	if err != nil {
		return err
	}
	delta := ""
	for i := range c.NumHiddenLayers {
		if x, delta, err = d.layer(i, x, delta, pos); err != nil {
			return err
		}
	}
	return d.head(b.Op("Add", []string{x, delta}), embed)
}

// layer emits one pre-norm block: attention then SwiGLU MLP, each added
// to the residual stream. The residual arrives as x plus the previous
// layer's MLP output delta ("" for the first layer) and leaves the same
// way, so every residual Add fuses into the norm that follows it.
func (d *decoder) layer(i int, x, delta, pos string) (residual, mlpOut string, err error) {
	b, c := d.b, d.c
	p := "model.layers." + strconv.Itoa(i) + "."
	var h string
	if delta == "" {
		h, err = d.rmsNorm(x, p+"input_layernorm.weight")
	} else {
		h, x, err = d.addRMSNorm(x, delta, p+"input_layernorm.weight")
	}
	if err != nil {
		return "", "", err
	}
	qDim, kvDim := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	qkvName, qkvParts := p+"self_attn.qkv_proj", []string{p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"}
	var attn string
	if d.opts.Contract == ContractPaged && !d.opts.PortableAttention {
		// the kernels' graph: split and rotary in one node (RotaryQKV)
		qkv, err := d.stacked(qkvName, h, qkvParts, []int{qDim, kvDim, kvDim}, c.HiddenSize, c.QKVBias())
		if err != nil {
			return "", "", err
		}
		attn = d.fusedAttention(i, qkv, pos)
	} else {
		qkv, err := d.linears(qkvName, h, qkvParts, []int{qDim, kvDim, kvDim}, c.HiddenSize, c.QKVBias())
		if err != nil {
			return "", "", err
		}
		q, k, v := qkv[0], qkv[1], qkv[2]
		q = d.rotary(q, pos, c.NumAttentionHeads)
		k = d.rotary(k, pos, c.NumKeyValueHeads)
		if d.opts.Contract == ContractPaged {
			attn = d.pagedAttention(i, q, k, v)
		} else {
			attn = d.compatibleAttention(i, q, k, v)
		}
	}
	o, err := d.linear(p+"self_attn.o_proj", attn, c.HiddenSize, qDim, c.OBias())
	if err != nil {
		return "", "", err
	}
	h, x, err = d.addRMSNorm(x, o, p+"post_attention_layernorm.weight")
	if err != nil {
		return "", "", err
	}
	gu, err := d.linears(p+"mlp.gate_up_proj", h, []string{p + "mlp.gate_proj", p + "mlp.up_proj"},
		[]int{c.IntermediateSize, c.IntermediateSize}, c.HiddenSize, false)
	if err != nil {
		return "", "", err
	}
	gate, up := gu[0], gu[1]
	act := b.Op("Mul", []string{b.Op("Mul", []string{gate, b.Op("Sigmoid", []string{gate})}), up})
	down, err := d.linear(p+"mlp.down_proj", act, c.HiddenSize, c.IntermediateSize, false)
	if err != nil {
		return "", "", err
	}
	return x, down, b.Err()
}

// head emits the final norm and the LM head on the positions whose logits
// are returned.
func (d *decoder) head(x string, embed Tensor) error {
	b, c := d.b, d.c
	vocab := onnx.Fixed(int64(c.VocabSize))
	last := d.opts.Contract == ContractPaged && !d.opts.AllLogits
	normed := false
	if d.opts.HiddenStates {
		// every position normalised once: the output, and the rows the
		// logits are gathered from (RMSNorm is per row, so gathering
		// after it gives the same logits)
		hs, err := d.rmsNorm(x, "model.norm.weight")
		if err != nil {
			return err
		}
		b.Node(onnx.DomainONNX, "Identity", []string{hs}, []string{"hidden_states"})
		b.Output("hidden_states", onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Sym("seq"), onnx.Fixed(int64(c.HiddenSize)))
		x, normed = hs, true
	}
	if last {
		// GatherElements along T with the index broadcast over hidden:
		// [B,1,1] → [B,1,H] picks row last_index[b] of each batch entry.
		idx := b.Op("Unsqueeze", []string{"last_index", b.Ints(1, 2)})
		idx = b.Op("Expand", []string{idx, b.Ints(1, 1, int64(c.HiddenSize))})
		x = b.Op("GatherElements", []string{x, idx}, onnx.AttrInt("axis", 1))
		x = b.Op("Reshape", []string{x, b.Ints(-1, int64(c.HiddenSize))})
	}
	h := x
	if !normed {
		var err error
		if h, err = d.rmsNorm(x, "model.norm.weight"); err != nil {
			return err
		}
	}
	lm := embed
	var err error
	if !c.TieWordEmbeddings {
		if lm, err = fetch(d.src, "lm_head.weight", c.VocabSize, c.HiddenSize); err != nil {
			return err
		}
	}
	logits, err := d.em.Linear(b, "lm_head", h, lm, nil)
	if err != nil {
		return err
	}
	b.Node(onnx.DomainONNX, "Identity", []string{logits}, []string{"logits"})
	if last {
		b.Output("logits", onnx.TensorProto_FLOAT, onnx.Sym("batch"), vocab)
	} else {
		b.Output("logits", onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Sym("seq"), vocab)
	}
	return b.Err()
}

// linear fetches name's weights and emits the projection through the
// emitter.
func (d *decoder) linear(name, x string, out, in int, hasBias bool) (string, error) {
	w, bias, err := d.weights(name, out, in, hasBias)
	if err != nil {
		return "", err
	}
	return d.em.Linear(d.b, name, x, w, bias)
}

// weights fetches name.weight ([out, in]) and, when hasBias, name.bias.
func (d *decoder) weights(name string, out, in int, hasBias bool) (Tensor, []float32, error) {
	w, err := fetch(d.src, name+".weight", out, in)
	if err != nil || !hasBias {
		return w, nil, err
	}
	bt, err := fetch(d.src, name+".bias", out)
	return w, bt.Data, err
}

// GraphRevision numbers the form of the graphs this package emits. Bump it
// whenever the emitted graph changes for the same config and options:
// caches of built bundles (the benchmarks' among them) key on it, so they
// never time an old graph. 4: q/k/v and gate/up stacked into one projection
// each. 5: paged attention by ai.edgeinfer.PagedAttention. 6: on the
// MatMulNBits kernel, gate/up and the SwiGLU activation as one node. 7:
// with PagedAttention, the q/k/v split and rotary by ai.edgeinfer.RotaryQKV.
// 8: quant's int4/int8 block scales rounded to float16. 9: on the kernel,
// each RMSNorm in the MatMulNBits node it feeds. 10: RotaryQKV inside
// PagedAttention (its fused form), one node a layer. 11: PagedAttention
// writes float32 and float16 pools itself (input slots, no new_keys /
// new_values outputs). 12: on the kernel, the head's greedy token as the
// output greedy_token (greedy.go). 13: on the kernel, the head picks and
// adds its last rows itself (lastrow.go). 14: on the kernel, the quantised
// embedding by ai.edgeinfer.GatherBlockQuantized (gather.go).
const GraphRevision = 14

// linears emits the projections parts of one input x as one: their
// weights (and biases) stacked along the output axis into name, one
// projection through the emitter, then a Split back into the parts. At
// batch 1 a small projection costs ONNX Runtime more in dispatch than in
// arithmetic, so q/k/v as one and gate/up as one take 24 nodes out of a
// 12-layer decode step. Blockwise quantisation works row by row, so the
// stacked weight quantises exactly as the parts would; a quantiser's keep
// rule sees the stacked name (e.g. "self_attn.qkv_proj": keep "self_attn").
func (d *decoder) linears(name, x string, parts []string, outs []int, in int, hasBias bool) ([]string, error) {
	y, err := d.stacked(name, x, parts, outs, in, hasBias)
	if err != nil {
		return nil, err
	}
	sizes := make([]int64, len(outs))
	for i, o := range outs {
		sizes[i] = int64(o)
	}
	return d.b.Node(onnx.DomainONNX, "Split", []string{y, d.b.Ints(sizes...)}, make([]string, len(parts)), onnx.AttrInt("axis", -1)), d.b.Err()
}

// stacked is linears' one projection, its output not split.
func (d *decoder) stacked(name, x string, parts []string, outs []int, in int, hasBias bool) (string, error) {
	total := 0
	for _, o := range outs {
		total += o
	}
	w := Tensor{Shape: []int{total, in}, Data: make([]float32, 0, total*in)}
	var bias []float32
	for i, part := range parts {
		t, b, err := d.weights(part, outs[i], in, hasBias)
		if err != nil {
			return "", err
		}
		w.Data = append(w.Data, t.Data...)
		bias = append(bias, b...)
	}
	return d.em.Linear(d.b, name, x, w, bias)
}

// rmsNorm emits SimplifiedLayerNormalization, ONNX Runtime's RMSNorm
// kernel (registered in the default domain).
func (d *decoder) rmsNorm(x, weight string) (string, error) {
	w, err := fetch(d.src, weight, d.c.HiddenSize)
	if err != nil {
		return "", err
	}
	return d.b.Op("SimplifiedLayerNormalization", []string{x, d.b.Float32(weight, []int64{int64(len(w.Data))}, w.Data)},
		onnx.AttrInt("axis", -1), onnx.AttrFloat("epsilon", float32(d.c.RMSNormEps))), d.b.Err()
}

// addRMSNorm emits com.microsoft.SkipSimplifiedLayerNormalization: one
// kernel for the residual sum x+delta and its RMSNorm, returning both (the
// normalised value, then the sum).
func (d *decoder) addRMSNorm(x, delta, weight string) (normed, sum string, err error) {
	w, err := fetch(d.src, weight, d.c.HiddenSize)
	if err != nil {
		return "", "", err
	}
	outs := d.b.Node(onnx.DomainMicrosoft, "SkipSimplifiedLayerNormalization",
		[]string{delta, x, d.b.Float32(weight, []int64{int64(len(w.Data))}, w.Data)},
		[]string{"", "", "", ""}, onnx.AttrFloat("epsilon", float32(d.c.RMSNormEps)))
	return outs[0], outs[3], d.b.Err()
}

// rotary applies com.microsoft.RotaryEmbedding (non-interleaved, the
// Hugging Face rotate_half form) to x [B, T, heads·headDim].
func (d *decoder) rotary(x, pos string, heads int) string {
	return d.b.MS("RotaryEmbedding", []string{x, pos, d.cos, d.sin},
		onnx.AttrInt("interleaved", 0), onnx.AttrInt("num_heads", int64(heads)))
}

// poolType is the pools' element type in the graph.
func (o *Options) poolType() onnx.TensorProto_DataType {
	switch {
	case o.KVInt8:
		return onnx.TensorProto_INT8
	case o.KVFloat16:
		return onnx.TensorProto_FLOAT16
	}
	return onnx.TensorProto_FLOAT
}

// writesPools reports whether the graph writes the step's keys and values
// into the pools itself (input slots) rather than returning them.
func (o *Options) writesPools() bool {
	return o.Contract == ContractPaged && !o.PortableAttention && !o.KVInt8 && !o.CallerScatters
}

// kvDType names the pools' element type as the metadata and bundle
// manifests record it.
func (o *Options) kvDType() string {
	switch {
	case o.KVInt8:
		return "int8"
	case o.KVFloat16:
		return "float16"
	}
	return "float32"
}
