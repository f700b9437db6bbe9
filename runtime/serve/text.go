package serve

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// text serves /v1/chat/completions (chat) and /v1/completions: the
// request checked, then handed to the engine as it came (messages, text
// or ids), which renders the chat template, encodes and stops at the turn
// end; what it refuses before the first token is an HTTP error.
func (s *Server) text(w *responseWriter, r *http.Request, chat bool) {
	if s.draining.Load() {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: strp("shutting_down"), RetryAfter: s.cfg.DrainTimeout,
			Message: "the server is shutting down: send the request to another instance or retry once it is back"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	var q textRequest
	if err := decodeJSON(r.Body, &q); err != nil {
		writeError(w, errorOf(err))
		return
	}
	v, err := q.validate(chat, r.Header)
	if err != nil {
		writeError(w, errorOf(err))
		return
	}
	m, release, aerr := s.hold(r.Context(), w, v.model, "decoder", v.keepAlive)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	defer release()
	w.model = m.Name
	_, textPlugin := m.Plugins["pre"]
	switch {
	case v.promptIDs == nil && !m.Tokenizer:
		writeError(w, withCode(badRequest("model", "%q has no tokenizer: send token ids as the prompt of /v1/completions", m.Name), "no_tokenizer"))
		return
	case v.promptIDs != nil && textPlugin:
		writeError(w, withCode(badRequest("prompt", "%q runs a pre plugin on the prompt text: send the prompt as text, not token ids", m.Name), "text_plugin"))
		return
	}
	id := newID(map[bool]string{true: "chatcmpl-", false: "cmpl-"}[chat])
	opts := engine.GenerateOptions{MaxTokens: v.maxTokens, Sampling: v.sampling, Stop: v.stop, Class: v.class, SLO: v.slo,
		FailFast: v.failFast, ID: id, MaxPromptTokens: s.cfg.MaxPromptTokens, FitContext: true,
		Constraint: v.constraint, LogProbs: v.logprobs, TopLogProbs: v.topLogprobs, KeepAlive: v.keepAlive}
	if v.tools != nil {
		opts.Tools = v.tools.tools
	}
	if v.tools.calls() {
		// the calls are written in the format the model's template teaches
		c, err := v.tools.forModel(m.ToolFormat)
		if err != nil {
			writeError(w, withCode(badRequest("tools", "%v", err), "unsupported_schema"))
			return
		}
		v.constraint, opts.Constraint = c, c
	}
	if v.constraint != nil && !m.Tokenizer {
		field := "response_format"
		if v.tools.calls() {
			field = "tools"
		}
		writeError(w, withCode(badRequest(field, "%q has no tokenizer: structured output needs one", m.Name), "no_tokenizer"))
		return
	}
	var st *engine.Stream
	switch {
	case chat:
		st = s.e.Chat(r.Context(), m.Name, v.messages, opts)
	case v.promptIDs != nil:
		st = s.e.GenerateTokens(r.Context(), m.Name, v.promptIDs, opts)
	default:
		st = s.e.Generate(r.Context(), m.Name, v.prompt, opts)
	}
	resp := &responder{s: s, w: w, chat: chat, id: id, model: m.Name, created: now().Unix(), v: v,
		ids: !m.Tokenizer, plugins: len(m.Plugins) > 0, release: release}
	if v.stream {
		resp.stream(st)
	} else {
		resp.whole(st)
	}
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// responder writes one request's answer, whole or as server-sent events.
type responder struct {
	s       *Server
	w       *responseWriter
	chat    bool
	id      string
	model   string
	created int64
	v       *validated
	// ids: the model has no tokenizer, so the answer is its token ids
	// (the "token_ids" extension; see the package doc).
	ids bool
	// plugins: the bundle's post plugin's result goes with the answer
	// (the "edgeinfer" extension).
	plugins bool
	// release ends the request's hold on the model (Server.hold): called
	// once the generation has ended, before the answer's last bytes.
	release func()
}

// pluginResult is the answer's "edgeinfer" extension for a model with
// plugins: the post plugin's result, or why there is none.
func (a *responder) pluginResult(st *engine.Stream) map[string]any {
	if !a.plugins {
		return nil
	}
	res, err := st.Result()
	if err != nil {
		return map[string]any{"result_error": err.Error()}
	}
	return map[string]any{"result": resultJSON(res)}
}

// resultJSON is a plugin result by tensor name as JSON values: a string
// for a text tensor, {"shape", "data"} for a numeric one.
func resultJSON(ts []abi.Tensor) map[string]any {
	out := map[string]any{}
	for _, t := range ts {
		var data any
		switch t.DType {
		case abi.String:
			out[t.Name], _ = t.Text()
			continue
		case abi.Float32:
			data = elements(t.Float32s())
		case abi.Float64:
			data = elements(t.Float64s())
		case abi.Int64:
			data = elements(t.Int64s())
		case abi.Int32:
			data = elements(t.Int32s())
		default: // uint8: bytes, as base64 by encoding/json
			data = t.Data
		}
		out[t.Name] = map[string]any{"shape": t.Shape, "data": data}
	}
	return out
}

// elements is a decoded plugin tensor's elements (typed: int64 stays exact,
// unlike values' float64s for an /infer response); the plugin ABI checked their
// count against the shape when the result crossed the boundary.
func elements[T any](v []T, _ error) any { return v }

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptDetails is OpenAI's prompt_tokens_details: cached_tokens is
	// the prompt prefix the KV cache held (restored from the persisted
	// prefix cache after a restart included).
	PromptDetails promptDetails `json:"prompt_tokens_details"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func usageOf(sum engine.Summary) *usage {
	return &usage{PromptTokens: sum.PromptTokens, CompletionTokens: sum.OutputTokens, TotalTokens: sum.PromptTokens + sum.OutputTokens,
		PromptDetails: promptDetails{CachedTokens: sum.CachedTokens}}
}

// finishReason is OpenAI's spelling of the engine's finish: the end of a
// turn or a stop string are "stop", a token limit is "length".
func finishReason(f engine.FinishReason) string {
	switch f {
	case engine.FinishLength, engine.FinishContextLength:
		return "length"
	}
	return "stop"
}

// failed reports whether a finish is an error rather than an answer.
func failed(sum engine.Summary) bool {
	switch sum.Finish {
	case engine.FinishError, engine.FinishDeadline, engine.FinishCancelled, engine.FinishRejected:
		return true
	}
	return sum.Err != nil
}

func (a *responder) summaryError(sum engine.Summary) *apiError {
	if sum.Err != nil {
		return a.errorOf(sum.Err)
	}
	if sum.Finish == engine.FinishDeadline {
		return &apiError{Status: http.StatusGatewayTimeout, Type: "server_error", Code: strp("deadline_exceeded"),
			Message: "the request's deadline passed before it finished: relax edgeinfer.deadline_ms or ask for fewer tokens"}
	}
	return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: "generation ended with " + sum.Finish.String()}
}

// errorOf is errorOf with what the engine refused of the prompt said in
// the request's terms: the field ("messages" or "prompt") and the counts.
func (a *responder) errorOf(err error) *apiError {
	field := map[bool]string{true: "messages", false: "prompt"}[a.chat]
	var pe *engine.PromptError
	switch {
	case errors.As(err, &pe) && pe.Tokens == 0:
		return badRequest(field, "the prompt encodes to no tokens: send some text")
	case errors.As(err, &pe) && pe.Limit > 0:
		return withCode(badRequest(field, "the prompt has %d tokens, more than this server's limit of %d: shorten it", pe.Tokens, pe.Limit), "prompt_too_long")
	case errors.As(err, &pe):
		out := "at least 1 in the completion"
		if pe.MaxTokens > 0 {
			out = fmt.Sprintf("%d in the completion (max_tokens)", pe.MaxTokens)
		}
		return withCode(badRequest(field, "this model's maximum context length is %d tokens, but you requested %d tokens (%d in the prompt, %s): shorten the prompt or lower max_tokens",
			pe.Context, pe.Tokens+max(pe.MaxTokens, 1), pe.Tokens, out), "context_length_exceeded")
	case errors.Is(err, engine.ErrChatTemplate):
		return withCode(badRequest("messages", "the model's chat template refused the conversation: %v", err), "chat_template")
	}
	return errorOf(err)
}

// logprobs is the answer's (or an event's) "logprobs" for toks, in
// OpenAI's shape: for chat {"content": [{token, logprob, bytes,
// top_logprobs}]}, for completions the legacy {tokens, token_logprobs,
// top_logprobs, text_offset} (offset: where toks' text begins).
func (a *responder) logprobs(toks []engine.Token, offset int) any {
	if a.chat {
		content := make([]map[string]any, 0, len(toks))
		for _, t := range toks {
			top := make([]map[string]any, 0, len(t.Top))
			for _, x := range t.Top {
				top = append(top, map[string]any{"token": string(x.Bytes), "logprob": x.LogProb, "bytes": byteList(x.Bytes)})
			}
			content = append(content, map[string]any{"token": string(t.Bytes), "logprob": t.LogProb, "bytes": byteList(t.Bytes), "top_logprobs": top})
		}
		return map[string]any{"content": content, "refusal": nil}
	}
	tokens, lps, offs := make([]string, len(toks)), make([]float32, len(toks)), make([]int, len(toks))
	tops := make([]any, len(toks))
	for i, t := range toks {
		tokens[i], lps[i], offs[i] = string(t.Bytes), t.LogProb, offset
		offset += len(t.Text)
		if a.v.topLogprobs > 0 {
			m := map[string]float32{}
			for _, x := range t.Top {
				m[string(x.Bytes)] = x.LogProb
			}
			tops[i] = m
		}
	}
	return map[string]any{"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs}
}

// byteList is bytes as a JSON list of numbers (OpenAI's "bytes").
func byteList(b []byte) []int {
	out := make([]int, len(b))
	for i, x := range b {
		out[i] = int(x)
	}
	return out
}

// counted tells the request log how the generation went.
func (a *responder) counted(sum engine.Summary) {
	a.w.generated, a.w.promptTokens, a.w.tokens = true, sum.PromptTokens, sum.OutputTokens
	a.w.cached, a.w.ttft = sum.CachedTokens, sum.TTFT
}

// whole collects the answer and writes one JSON response.
func (a *responder) whole(st *engine.Stream) {
	var text strings.Builder
	var ids []int32
	var lps []engine.Token
	for tok, err := range st.Tokens() {
		if err != nil {
			break
		}
		text.WriteString(tok.Text)
		if a.ids {
			ids = append(ids, tok.ID)
		}
		if a.v.logprobs {
			lps = append(lps, tok)
		}
	}
	sum := st.Summary()
	a.release()
	a.counted(sum)
	if failed(sum) {
		writeError(a.w, a.summaryError(sum))
		return
	}
	choice := map[string]any{"index": 0, "finish_reason": finishReason(sum.Finish), "logprobs": nil}
	if a.v.logprobs {
		choice["logprobs"] = a.logprobs(lps, 0)
	}
	object := "text_completion"
	if a.chat {
		object = "chat.completion"
		msg := map[string]any{"role": "assistant", "content": text.String(), "refusal": nil}
		if a.v.tools.calls() && a.v.tools.isCall(text.String()) {
			// cut short (max_tokens, a stop string), the call does not
			// parse: the text is the answer, with its finish reason
			if calls, ok := a.v.tools.parseCalls(text.String()); ok {
				msg["content"], msg["tool_calls"] = nil, calls
				if sum.Finish == engine.FinishStop || sum.Finish == engine.FinishStopString {
					choice["finish_reason"] = "tool_calls"
				}
			}
		}
		choice["message"] = msg
	} else {
		choice["text"] = text.String()
	}
	if a.ids {
		choice["token_ids"] = ids
	}
	body := map[string]any{"id": a.id, "object": object, "created": a.created, "model": a.model,
		"choices": []any{choice}, "usage": usageOf(sum)}
	if ext := a.pluginResult(st); ext != nil {
		body["edgeinfer"] = ext
	}
	writeJSON(a.w, http.StatusOK, body)
}

// stream sends the answer as server-sent events. The status is decided by
// the first token: a request refused before it (overload, a bad prompt)
// gets its HTTP error, not a 200 with an error event.
func (a *responder) stream(st *engine.Stream) {
	next, stop := iter.Pull2(st.Tokens())
	defer stop()
	first, err, ok := next()
	if err != nil || !ok {
		sum := st.Summary()
		a.counted(sum)
		if err != nil {
			writeError(a.w, a.errorOf(err))
			return
		}
		if failed(sum) {
			writeError(a.w, a.summaryError(sum))
			return
		}
	}
	h := a.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	a.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(a.w)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(a.w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	object := "text_completion"
	if a.chat {
		object = "chat.completion.chunk"
	}
	chunk := func(text string, finish *string) map[string]any {
		c := map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil}
		if a.chat {
			c["delta"] = map[string]any{"content": text}
			if finish != nil {
				c["delta"] = map[string]any{}
			}
		} else {
			c["text"] = text
		}
		return map[string]any{"id": a.id, "object": object, "created": a.created, "model": a.model, "choices": []any{c}}
	}
	a.s.metrics.streams.Inc()
	defer a.s.metrics.streams.Dec()
	if a.chat {
		role := chunk("", nil)
		role["choices"].([]any)[0].(map[string]any)["delta"] = map[string]any{"role": "assistant", "content": ""}
		if !send(role) {
			return
		}
	}
	// Token events are the hot path (one per token): their JSON is a
	// fixed prefix, the quoted text and a fixed suffix, written from one
	// reused buffer (BenchmarkHTTPOverhead).
	model, _ := json.Marshal(a.model)
	prefix := fmt.Appendf(nil, `data: {"id":%q,"object":%q,"created":%d,"model":%s,"choices":[{"index":0,"finish_reason":null,"logprobs":null,`,
		a.id, object, a.created, model)
	suffix := "}]}\n\n"
	if a.chat {
		prefix = append(prefix, `"delta":{"content":`...)
		suffix = "}}]}\n\n"
	} else {
		prefix = append(prefix, `"text":`...)
	}
	buf := make([]byte, 0, len(prefix)+64)
	offset := 0 // the text sent so far, for completions' text_offset
	// calls turns the output into content and tool_calls deltas when the
	// model may call a tool; pending are the tokens (for their
	// log-probabilities) not yet sent with an event.
	var calls *callStream
	var pending []engine.Token
	if a.chat && a.v.tools.calls() {
		calls = a.v.tools.newCallStream()
	}
	for ok {
		if err != nil {
			break
		}
		if calls != nil {
			if a.v.logprobs {
				pending = append(pending, first)
			}
			content, deltas := calls.feed(first.Text)
			if content != "" || len(deltas) > 0 {
				c := chunk("", nil)
				ch := c["choices"].([]any)[0].(map[string]any)
				d := map[string]any{}
				if content != "" {
					d["content"] = content
				}
				if len(deltas) > 0 {
					d["tool_calls"] = deltas
				}
				ch["delta"] = d
				if len(pending) > 0 {
					ch["logprobs"] = a.logprobs(pending, 0)
					pending = nil
				}
				if !send(c) {
					return
				}
			}
			first, err, ok = next()
			continue
		}
		if a.v.logprobs {
			// the slow path: one event per token, with its log-probabilities
			c := chunk(first.Text, nil)
			c["choices"].([]any)[0].(map[string]any)["logprobs"] = a.logprobs([]engine.Token{first}, offset)
			offset += len(first.Text)
			if !send(c) {
				return
			}
			first, err, ok = next()
			continue
		}
		buf = buf[:0]
		switch {
		case a.ids:
			buf = append(append(buf, prefix...), `"","token_ids":[`...)
			buf = append(append(strconv.AppendInt(buf, int64(first.ID), 10), ']'), suffix...)
		case first.Text != "":
			text, _ := json.Marshal(first.Text)
			buf = append(append(append(buf, prefix...), text...), suffix...)
		}
		if len(buf) > 0 {
			if _, werr := a.w.Write(buf); werr != nil || rc.Flush() != nil {
				return // the client is gone: stop() cancels the generation
			}
		}
		first, err, ok = next()
	}
	stop()
	sum := st.Summary()
	a.release()
	a.counted(sum)
	if failed(sum) {
		if sum.Finish != engine.FinishCancelled {
			send(map[string]any{"error": a.summaryError(sum)})
		}
		return
	}
	fin := finishReason(sum.Finish)
	if calls != nil && calls.index > 0 && (sum.Finish == engine.FinishStop || sum.Finish == engine.FinishStopString) {
		fin = "tool_calls"
	}
	last := chunk("", &fin)
	if len(pending) > 0 {
		last["choices"].([]any)[0].(map[string]any)["logprobs"] = a.logprobs(pending, 0)
	}
	if !send(last) {
		return
	}
	if a.v.usage {
		send(map[string]any{"id": a.id, "object": object, "created": a.created, "model": a.model, "choices": []any{}, "usage": usageOf(sum)})
	}
	if ext := a.pluginResult(st); ext != nil {
		// after the last token: the post plugin read the whole output
		send(map[string]any{"id": a.id, "object": object, "created": a.created, "model": a.model, "choices": []any{}, "edgeinfer": ext})
	}
	fmt.Fprint(a.w, "data: [DONE]\n\n")
	_ = rc.Flush()
}
