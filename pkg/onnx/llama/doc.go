// Package llama builds ONNX decoder graphs for the Llama family
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM) from a Hugging
// Face config.json and weights under Hugging Face tensor names.
//
// Weights come from a WeightSource (safetensors, or SyntheticSource's
// seeded random weights) and become nodes through a WeightEmitter, one
// tensor at a time: FP32Emitter by default, a quantising emitter from the
// quant packages otherwise. WriteModel streams large weights to an external
// data file, so models over 2 GB build in bounded memory.
//
// # Paged contract (ContractPaged)
//
// Symbolic dims: batch B, seq T (new tokens per row, right-padded when
// ragged), max_blocks M, num_blocks N. Fixed: kvH = num_key_value_heads,
// D = head_dim, bs = Options.BlockSize (default 16, recorded in the model
// metadata "edgeinfer.block_size").
//
//	inputs
//	  input_ids        int64   [B, T]
//	  position_ids     int64   [B, T]      absolute positions (< MaxPositions)
//	  block_tables     int64   [B, M]      pool block ids; pad with any valid id
//	  context_lens     int64   [B]         tokens already in the pool per row
//	  last_index       int64   [B]         index in [0,T) whose logits are returned
//	                                       (absent with Options.AllLogits)
//	  key_cache.{i}    float32 [kvH, N, bs, D]   head-major pool, layer i
//	  value_cache.{i}  float32 [kvH, N, bs, D]
//	  (Options.KVInt8: both pools int8, plus
//	  key_scale.{i}    float32 [kvH, N]        one scale per (head, block)
//	  value_scale.{i}  float32 [kvH, N]        value = int8 × scale)
//	  slots            int64   [B, T]      each new token's pool slot
//	                                       (block·bs + offset; < 0: padding)
//	                                       — the graph writes the pools
//	outputs
//	  logits           float32 [B, vocab]   (AllLogits: [B, T, vocab])
//	  greedy_token     int64   [B]         each row's argmax of its logits,
//	                                       found by the head as it writes
//	                                       them (on the kernel, without
//	                                       AllLogits: OutputGreedy)
//	  (where the caller writes the pools, instead of slots:
//	  new_keys.{i}     float32 [B, kvH, T, D]  this step's keys, after RoPE
//	  new_values.{i}   float32 [B, kvH, T, D])
//
// Attention itself is one node per layer, ai.edgeinfer.PagedAttention,
// edgeinfer's CPU kernel that runtime/ort registers with every session: it
// reads each row's blocks through the block table in place and the step's
// own keys and values, so a decode step neither gathers nor copies the
// cache; against the same graph built from standard operators it decodes
// faster at batch 1 and 8 and runs prefill chunks no slower.
// BenchmarkDecodeRate (runtime/engine) measures it with
// EDGEINFER_BENCH_BUNDLE set to a synthetic-110m bundle built each way;
// BenchmarkPagedAttentionDecode (runtime/ort) times the kernel alone.
// Options.PortableAttention builds that portable form instead (Gather of
// the blocks, FusedMatMul against the cache and the new keys separately,
// masked Softmax, MatMuls; ~25 nodes per layer), for an ONNX Runtime or
// execution provider without edgeinfer's kernel; both forms give the same
// logits.
//
// Int8 pools (metadata "edgeinfer.kv_dtype" = "int8") are converted as
// they are read, each block's scale applied to its scores and
// probabilities rather than to its head_dim keys and values (in the
// portable form: cast after the gather, scales on the past scores and past
// probabilities). The new keys and values are still returned as float32
// for the caller to quantise as it scatters them.
//
// Row b attends to pool slots p < context_lens[b] — slot p lives in block
// block_tables[b][p/bs] at offset p%bs — and causally to its own new
// tokens. Pool slots must hold finite values (zero the pool once).
//
// # Who writes the pools
//
// Token t of row b belongs at position context_lens[b]+t. The kernel graph
// with float32 or float16 pools (GraphRevision 11 on) takes that position's
// slot in the input slots and its PagedAttention nodes write the token's
// keys and values there, rounded to float16 for a float16 pool as
// runtime/kvcache rounds them: each node while the keys are still in its
// threads' caches, instead of the caller reading them back from outputs
// and writing them on one thread after the run (runtime/engine's
// BenchmarkBatchScaling times a step each way). The pools are inputs the
// caller binds to its own memory, which the nodes write in place. Int8
// pools (a new key can grow its block's scale and requantise the block),
// the portable form, Options.CallerScatters and graphs built before
// revision 11 return new_keys / new_values instead, and the caller
// scatters them; runtime/internal/llm serves both forms, so bundles built
// before keep working.
//
// The int4 and int8 projections (block 32, symmetric) run on edgeinfer's
// ai.edgeinfer.MatMulNBits kernel unless Options.PortableMatMul, registered by runtime/ort
// like PagedAttention; the node keeps com.microsoft.MatMulNBits' inputs and
// attributes, so SetMatMulKernel turns either graph into the other and
// metadata "edgeinfer.matmul" says which it is.
//
// # Compatible contract (ContractCompatible)
//
// Hugging Face Optimum's names, with GroupQueryAttention inside:
//
//	inputs   input_ids [B,T], attention_mask [B, past+T], position_ids [B,T],
//	         past_key_values.{i}.key/value float32 [B, kvH, past, D]
//	outputs  logits [B, T, vocab], present.{i}.key/value [B, kvH, past+T, D]
//
// Rows are right-padded: attention_mask[b] is ones for the row's valid
// past and new tokens, then zeros, and row b's new keys land in present at
// [sum(mask[b])−T, sum(mask[b])). With a past, T > 1 needs B = 1
// (GroupQueryAttention's rule).
//
// Both contracts built from the same weights give the same logits (tested
// against a pure-Go reference forward pass to 1e-4).
package llama
