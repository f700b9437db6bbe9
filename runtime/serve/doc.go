// Package serve is edgeinfer's local HTTP API: the engine behind the
// endpoints OpenAI's clients speak, so programs not written in Go (a
// kiosk's browser UI, a Python script, Node-RED) use the device's models
// with the libraries they already have. `edgeinfer serve` runs it.
//
// # Endpoints
//
//	POST /v1/chat/completions   messages → the model's chat template → tokens
//	POST /v1/completions        prompt (a string, [string] or token ids)
//	GET  /v1/models, /v1/models/{model}
//	POST /v1/infer/{model}      one-shot models: JSON tensors or a .npy body
//	POST /v1/embeddings         input (a string, [string], token ids or
//	                            [[ids]]) → pooled, normalised vectors
//	GET  /health                the process answers (no token needed)
//	GET  /ready                 models loaded and not draining (503 otherwise)
//	GET  /metrics               Prometheus text: request histograms, outcomes,
//	                            tokens, queue, KV blocks per model (in use,
//	                            cached, evicted) and prefix-cache hits, HTTP
//	                            codes, Go runtime and process (RSS, goroutines)
//
// Text requests take model, messages or prompt, stream (server-sent events,
// ending with "data: [DONE]"), stream_options.include_usage, max_tokens (or
// max_completion_tokens; default: up to the context), temperature, top_p,
// top_k, min_p, presence_penalty, frequency_penalty, repetition_penalty,
// seed (together: reproducible sampling; none of them: the bundle's
// defaults), stop (up to four strings), n (1 only), response_format and
// logprobs. Answers carry usage and finish_reason from the engine's
// summary: "stop" for the end of the turn or a stop string, "length" for
// max_tokens or the context.
//
// /v1/embeddings takes model, input, encoding_format ("float", the
// default, or "base64": little-endian float32 bytes, which OpenAI's
// clients decode), dimensions (only the model's own size: no bundle says
// its vectors may be shortened) and user (ignored); any other field is a
// 400 naming it. The answer is OpenAI's list of {"object": "embedding",
// "index", "embedding"} with usage.prompt_tokens. A decoder embeds when
// its graph returns hidden_states (model import --hidden-states): its
// final hidden states mean-pooled and L2-normalised, through the
// scheduler like any prompt; "edgeinfer": {"pooling": "last" | "mean" |
// "first", "normalize": false} changes that. A one-shot sentence-embedding
// export with a tokenizer embeds too (engine.Embed). An empty input, or one
// over the context, is a 400 naming input[i] (with its length).
//
// response_format {"type": "json_schema", "json_schema": {"name",
// "schema", "strict"}} constrains the answer to JSON the schema accepts
// (engine.JSONSchema: the schema is compiled before anything runs, and
// one it cannot honour is a 400 naming the construct, code
// unsupported_schema); {"type": "json_object"} to one JSON object; "text"
// leaves it free. The JSON is compact, and the answer stays completable
// within max_tokens (a max_tokens smaller than the shortest valid answer
// still ends at "length" with it incomplete, as OpenAI's does). logprobs
// (chat: true, with top_logprobs up to 20; completions: the number of
// alternatives, up to 5) adds each token's log-probability, of the
// distribution it was sampled from after the constraint's mask, in
// OpenAI's shapes, whole and streamed.
//
// tools (functions: {"type": "function", "function": {"name",
// "description", "parameters"}}), tool_choice ("auto", the default with
// tools; "none"; "required"; {"type": "function", "function": {"name"}})
// and parallel_tool_calls (default true) call tools. Each tool is checked
// before anything runs: a name of 1 to 64 letters, digits, _ or -, unique;
// parameters an object schema the compiler honours (omitted: no
// parameters), else a 400 naming the tool and the construct (param
// tools[i].function.parameters, code unsupported_schema). The tools go to
// the chat template's tools variable. With "required" or a named function
// the answer is constrained to {"name", "arguments"} JSON, an anyOf over
// the tools pairing each name with its parameters (or, with parallel
// calls, a list of one or more); with "auto" to that or text whose first
// character that is not white space is neither '{' nor '[' (the first
// character decides; see tools.go); "none" renders the tools and leaves
// the answer free. A call answers with message.tool_calls ([{id "call_…",
// type "function", function {name, arguments: JSON text}}]), content null
// and finish_reason "tool_calls"; streamed, the first delta of call i
// carries its id, type, function.name and arguments "", the next ones
// argument fragments. A call cut short by max_tokens is returned as its
// text with finish_reason "length". Assistant messages with tool_calls
// and tool messages (tool_call_id required) are taken and rendered by the
// template. response_format json_object or json_schema beside tools that
// may be called is refused (400 response_format).
//
// A field that would change what is generated and that the server does
// not implement is refused with 400 naming it (code unsupported_parameter),
// never ignored: functions, function_call (send tools), logit_bias,
// best_of, echo, suffix, prediction, audio, non-text modalities,
// web_search_options, reasoning_effort, verbosity, and other servers'
// extensions (guided_json, guided_regex, guided_choice, guided_grammar,
// grammar, json_schema, min_tokens, ignore_eos, allowed_token_ids,
// bad_words); sent with a value that changes nothing (null, [], {},
// "none") they are accepted. Other unknown fields (user, metadata, store)
// are ignored, as other OpenAI-compatible servers do.
//
// A model served without a tokenizer (a synthetic bundle, or one whose
// application tokenizes itself) takes its prompt as token ids and answers
// with them: every streamed event carries text "" and "token_ids": [id]
// (one event per token, as for text), and a whole answer's choice carries
// "token_ids" with the completion's ids. Benchmarks then time tokens from
// the stream as for any model.
//
// A decoder bundle with plugins (runtime/engine: a pre plugin on the
// prompt text, a post plugin on the whole output) is served through them:
// its prompt goes to the engine as text (a rendered chat template, or the
// completion's prompt; token ids are refused), and the answer carries the
// post plugin's result as "edgeinfer": {"result": {name: value}} (a
// string for a text tensor, {"shape", "data"} otherwise) — in the whole
// answer, or in one more event after the last token when streamed.
//
// Chat messages are rendered by the bundle's chat template (Hugging Face's
// chat_template, kept by `model import --hf`) with add_generation_prompt,
// and generation also stops at the template's turn-end marker. A model
// without a template (trained on plain text) gets the turns' contents one
// paragraph each.
//
// # Priority and SLO (extension)
//
// A request may carry an "edgeinfer" object:
//
//	"edgeinfer": {"class": "realtime", "ttft_ms": 150, "tpot_ms": 50, "deadline_ms": 5000, "fail_fast": true}
//
// or the headers X-Edgeinfer-Class: realtime, X-Edgeinfer-SLO:
// ttft=150ms,tpot=50ms,deadline=5s and X-Edgeinfer-Fail-Fast: 1 (the body
// wins). class is realtime, interactive (default) or batch; the SLO goes to
// the scheduler, which orders and admits by it. With fail_fast a request
// whose predicted TTFT exceeds its SLO is refused at once: 429 with
// Retry-After (seconds, from the scheduler's estimate), as is a request
// whose class queue is full.
//
// # Models under a memory budget (extension)
//
// With the engine's memory budget (engine.Config.MemoryBudgetBytes, serve
// --memory-budget), a request naming a model that is not loaded (one
// configured, or one of the store's) loads it first, unloading idle ones
// least recently used; the response then carries X-Edgeinfer-Load-Ms.
// "edgeinfer": {"keep_alive": "30s"} (a Go duration, or seconds as a
// number; 0 unloads the model after the request, negative keeps it) sets
// how long the model stays after its last request, as Ollama's
// keep_alive. GET /v1/models lists every model the engine can serve with
// "loaded", "memory_bytes" (what it counts against the budget) and
// "expires_at" (Unix seconds; when its keep-alive ends if no request
// comes). A model that cannot fit even with every idle one unloaded is a
// 507, code model_too_large, naming it, its size and the budget.
//
// # Errors
//
// Errors use OpenAI's shape, {"error": {"message", "type", "param",
// "code"}}, and the message says what to change: 400 names the field
// (malformed JSON gives the byte offset; a prompt past the context gives
// the token counts, code context_length_exceeded), 401 a missing or wrong
// bearer token, 404 an unknown model (listing those served), 413 a body
// over the limit, 429 overload, 503 shutting down, 504 a deadline passed,
// 507 a model over the memory budget.
// A stream that fails after its first event ends with an error event.
//
// # Lifecycle
//
// A client that disconnects cancels its request: the engine stops it
// within one step and frees its KV blocks. Serve, when its context ends,
// drains: /ready turns 503, new generations are refused, running streams
// get Config.DrainTimeout to finish, then are cancelled.
//
// The server speaks the engine's own types: New takes the *engine.Engine,
// the model list is the engine's at each request (a model loaded,
// unloaded or swapped at run time is served as it is then), and a model's
// text (chat template, encoding, stop strings, turn end) is the engine's:
// the server hands it messages, text or ids.
//
// With a logger, each request is a line at Info: method, path, status,
// model, duration and, for a generation, its prompt and output tokens.
package serve
