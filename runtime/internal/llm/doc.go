// Package llm runs decoder language models on ONNX Runtime for the engine:
// it loads a bundle's decoder in either contract (the paged graph that
// reads the KV cache in place through block tables, or the compatible
// Optimum/genai layout through an adapter that gathers a padded past), owns
// its KV cache (runtime/internal/kvcache) and its per-step tensors outside
// the Go heap, and implements the scheduler's Decoder: Admit reserves KV
// (reporting prefix-cache hits), Step runs the step's decode rows as one
// batched run and each prefill chunk as a run of its own — the graph writes
// the step's new keys and values into their pool slots itself (its input
// slots), or, for int8 pools and graphs built before that form, returns
// them and the step scatters them — and samples one token per row.
//
// # Sampling
//
// Each sequence has its own Sampler (penalties, temperature, top-k, top-p,
// min-p in Hugging Face's order) with its own seeded random stream, so a
// seeded request gives the same tokens whatever it is batched with. End of
// sequence ends a sequence with FinishStop, a full context with
// FinishContextLength. A request's Decoding (sched.Request.Attach) adds a
// grammar constraint, whose mask sets the disallowed tokens' logits to
// −Inf after the penalties and before temperature, top-k, top-p and min-p
// (greedy included), row by row, and log-probabilities to record.
//
// # Offline use
//
// Generate and Score drive one sequence from the calling goroutine, with no
// scheduler: the engine's Scorer (perplexity, quantisation quality reports)
// is built on them. They must not be used on a model a scheduler drives.
//
// The package is internal: applications use runtime/engine, whose
// vocabulary (Sampling, FinishReason, KVOptions) mirrors what is here.
package llm
