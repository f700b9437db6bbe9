// Package engine is the one package an application imports to run models on
// the device it sits on: language models that stream tokens (Generate) and
// one-shot models such as detectors and classifiers (Infer), sharing one
// device under one scheduler, with every request's timeline measured on the
// device.
//
// # Opening
//
// Open takes a Config — plain data that can come from a file or over MQTT —
// naming model bundles on disk (ModelSpec.Dir) or in the offline model store
// (ModelSpec.Ref with Config.Store), the ONNX Runtime session options
// (threads, execution providers with CPU fallback), the KV cache (KVOptions)
// and the scheduler (SchedulerConfig). Nothing touches the network. Close
// drains running requests until its context ends, then cancels the rest and
// frees everything; after it, every call fails with ErrClosed.
//
// # Generating
//
// Generate returns a Stream. Ranging over Stream.Tokens submits the request
// and yields tokens as the device samples them; breaking out of the loop or
// cancelling the context ends the request within one step and frees its KV
// blocks. Stream.Summary then says how it ended — the FinishReason (end
// token, stop string, max tokens, context length, cancelled, deadline,
// rejected, error), token counts, TTFT and TPOT — so a reply cut at the
// context length is never mistaken for a complete one. Sampling left nil
// takes the bundle's generation defaults.
//
// The engine owns a model's text: GenerateTokens takes ids, Generate a
// text it encodes with the bundle's tokenizer, and Chat a conversation it
// renders with the bundle's chat template (compiled once, at load) and
// encodes, stopping at the template's turn end. Stop strings never show in
// the output. ModelInfo says what a front end needs to know first (a
// tokenizer, a chat template and its turn end, the context length), and a
// prompt refused for its length is a *PromptError with the counts.
//
// # Structured output
//
// GenerateOptions.Constraint restricts the output to a grammar: a JSON
// Schema (JSONSchema: OpenAI's strict mode and more, refusing with an
// error naming any construct it cannot honour), one JSON object (JSON), or
// a regular expression (Regex). The grammar is compiled to DFAs over bytes
// (rules that call each other for recursion) and walked against a trie of
// the model's tokens, so a token spanning several grammar symbols is
// judged whole; the end token is allowed only where the output is
// complete, and JSON is written without optional whitespace. Each row's
// mask is applied in sampling, so constrained and free requests batch
// together, and a preempted sequence rebuilds its state from its tokens.
// GenerateOptions.LogProbs and TopLogProbs add each token's
// log-probability and its most likely alternatives to Token.
//
// For tool calls, GenerateOptions.Tools reach Chat's template (its tools
// variable), ChatMessage carries assistant ToolCalls and tool results
// (ToolCallID, Name), and JSONSchemaOrText constrains an output to a
// schema's JSON or text that does not begin with '{' or '[' (a model that
// may answer or call: runtime/serve builds the calls' schema).
//
// Requests carry a Class (realtime, interactive, batch) and an SLO. The
// scheduler batches running streams continuously, spreads long prompts over
// steps in chunks, serves higher classes first (preempting lower ones when
// the KV cache runs out), and with FailFast refuses at once, with an
// *OverloadError saying when to retry, a request whose TTFT objective it
// cannot meet.
//
// # Embeddings
//
// Embed returns one L2-normalised vector per input (a text or token ids):
// a decoder's final hidden states, mean-pooled by default (PoolLast for
// decoder embedding models trained on the last token), when its graph
// returns them (llama.Options.HiddenStates); each input is a request the
// scheduler admits like a prompt whose prefill ends it, so embeddings and
// generations share the device by class and an input's vector does not
// depend on what it was batched with. A one-shot sentence-embedding export
// (input_ids, attention_mask, token_type_ids → last_hidden_state or
// sentence_embedding) with a tokenizer in its bundle embeds through
// Infer's dynamic batching. An input refused for its length is an
// *InputError naming it.
//
// # One-shot models
//
// Infer runs a one-shot model on named tensors (runtime/ort) with
// InferOptions like Generate's. Requests for the same model that queue
// together run as one batch; a realtime frame waits at most for the step in
// flight.
//
// # Records and observers
//
// Every request — refused, cancelled and failed ones included — leaves a
// Record (a pkg/metrics Timeline: arrival, admission, first scheduled, each
// token, finish, outcome, finish reason, model, class). Observers in
// Config.Observers (or added with Observe) are told of each one on an engine
// goroutine, never on the device loop; the Prometheus collector of
// pkg/metrics/prom and a metrics.Recorder are observers as they are. Stats
// is a cheap snapshot of the scheduler's counters and each KV cache.
//
// # Changing models while running
//
// Load and Unload add and remove models. Swap replaces a model's version
// atomically: the new version is loaded beside the old, a HealthCheck runs
// against it, and only then do new requests go to it while running ones
// finish on the old version. This is what over-the-air updates use.
//
// # Models under a memory budget
//
// Config.MemoryBudgetBytes bounds the loaded models together; a request
// naming a model not loaded (one of Config.Models, or of the store) loads
// it, a model stays while used and Config.KeepAlive after (or a
// request's KeepAlive), and a load that needs room unloads idle models,
// least recently used, never one with a request queued or running. Hold
// keeps a model loaded across a caller's own checks; Available lists
// what is loaded and what could be; a model that can never fit is a
// *BudgetError (resident.go says what is counted).
//
// # Warm after a restart
//
// Config.PrefixPersist keeps each decoder's prefix cache across restarts,
// swaps of other models and unloads: prompt prefixes' KV blocks are saved
// beside the store (those a later prompt reused when the device goes idle
// and at most every 30 s while it is busy; the most recent of all at Close
// and when a model is unloaded), and
// after a start a prompt that begins with a saved prefix restores those
// blocks instead of computing them (Summary.CachedTokens counts them). A
// file is keyed by the model version's digest and the KV format and
// checked record by record; anything else is ignored, never served. A
// decoder also runs a short warm-up at load, so a session's first-run
// costs are paid before the first request.
//
// # Offline scoring
//
// OpenScorer loads one decoder without a scheduler for perplexity and
// quantisation quality reports.
//
// The machinery behind this package — the scheduler, the decoder executor
// and the paged KV cache — lives in runtime/internal and may change freely;
// runtime/ort and runtime/tokenizer stay public for lower-level use.
package engine
