package serve

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"

	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// text serves /v1/chat/completions (chat) and /v1/completions.
func (s *Server) text(w http.ResponseWriter, r *http.Request, chat bool) {
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
	m, aerr := s.findModel(v.model, "decoder")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	prompt, text, aerr := s.promptOf(m, v, chat)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	maxTokens := v.maxTokens
	if maxTokens == 0 {
		maxTokens = m.Context - len(prompt)
	}
	stop := v.stop
	if chat {
		stop = append(stop, m.Stop...)
	}
	id := newID(map[bool]string{true: "chatcmpl-", false: "cmpl-"}[chat])
	req := GenerateRequest{Model: m.Name, Prompt: prompt, MaxTokens: maxTokens, Sampling: v.sampling,
		Stop: stop, Class: v.class, SLO: v.slo, FailFast: v.failFast, ID: id}
	if m.TextPlugin { // the bundle's pre plugin works on the text
		req.Text, req.TextHasSpecials = text.text, text.specials
	}
	st := s.b.Generate(r.Context(), req)
	resp := &responder{s: s, w: w, chat: chat, id: id, model: m.Name, created: now().Unix(), v: v, ids: m.Tokenizer == nil, plugins: m.Plugins}
	if v.stream {
		resp.stream(st)
	} else {
		resp.whole(st)
	}
}

// promptText is a request's prompt as text, for a model whose pre plugin
// works on it: specials says the text carries its special tokens.
type promptText struct {
	text     string
	specials bool
}

// promptOf renders and encodes the prompt, and checks it against the
// context and the server's limit.
func (s *Server) promptOf(m *Model, v *validated, chat bool) ([]int32, promptText, *apiError) {
	var text promptText
	if v.promptIDs == nil && m.Tokenizer == nil {
		return nil, text, withCode(badRequest("model", "%q has no tokenizer: send token ids as the prompt of /v1/completions", m.Name), "no_tokenizer")
	}
	if v.promptIDs != nil && m.TextPlugin {
		return nil, text, withCode(badRequest("prompt", "%q runs a pre plugin on the prompt text: send the prompt as text, not token ids", m.Name), "text_plugin")
	}
	var ids []int
	switch {
	case v.promptIDs != nil:
		for i, id := range v.promptIDs {
			if m.Tokenizer != nil && (id < 0 || int(id) >= m.Tokenizer.VocabSize()) {
				return nil, text, badRequest(fmt.Sprintf("prompt[%d]", i), "token id %d is outside the vocabulary [0, %d)", id, m.Tokenizer.VocabSize())
			}
		}
	case chat:
		msgs := make([]tokenizer.ChatMessage, len(v.messages))
		for i, x := range v.messages {
			msgs[i] = tokenizer.ChatMessage{Role: x.Role, Content: x.Content}
		}
		var err error
		if text.text, text.specials, err = chatText(m, msgs); err != nil {
			return nil, text, withCode(badRequest("messages", "the model's chat template refused the conversation: %v", err), "chat_template")
		}
		ids = m.Tokenizer.EncodeWith(text.text, tokenizer.EncodeOptions{AddSpecialTokens: !text.specials, SplitSpecialTokens: true})
	default:
		text.text = v.prompt
		ids = m.Tokenizer.EncodeWith(v.prompt, tokenizer.EncodeOptions{AddSpecialTokens: true, SplitSpecialTokens: true})
	}
	prompt := v.promptIDs
	if prompt == nil {
		prompt = make([]int32, len(ids))
		for i, id := range ids {
			prompt[i] = int32(id)
		}
	}
	field := map[bool]string{true: "messages", false: "prompt"}[chat]
	if len(prompt) == 0 {
		return nil, text, badRequest(field, "the prompt encodes to no tokens: send some text")
	}
	if lim := s.cfg.MaxPromptTokens; lim > 0 && len(prompt) > lim {
		return nil, text, withCode(badRequest(field, "the prompt has %d tokens, more than this server's limit of %d: shorten it", len(prompt), lim), "prompt_too_long")
	}
	if m.Context > 0 && len(prompt)+max(v.maxTokens, 1) > m.Context {
		out := "at least 1 in the completion"
		if v.maxTokens > 0 {
			out = fmt.Sprintf("%d in the completion (max_tokens)", v.maxTokens)
		}
		return nil, text, withCode(badRequest(field, "this model's maximum context length is %d tokens, but you requested %d tokens (%d in the prompt, %s): shorten the prompt or lower max_tokens",
			m.Context, len(prompt)+max(v.maxTokens, 1), len(prompt), out), "context_length_exceeded")
	}
	return prompt, text, nil
}

// ChatPrompt is the prompt a chat request to m becomes: msgs rendered by
// the model's chat template with the generation prompt, encoded as
// Hugging Face does (the template writes its own special tokens). A model
// without a template (trained on plain text) gets the turns' contents,
// one paragraph each, encoded as plain text. Generation should also stop
// at m.Stop. `edgeinfer generate --chat` uses it too.
func ChatPrompt(m *Model, msgs []tokenizer.ChatMessage) ([]int32, error) {
	if m.Tokenizer == nil {
		return nil, fmt.Errorf("serve: model %q has no tokenizer", m.Name)
	}
	ids, err := chatIDs(m, msgs)
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, nil
}

func chatIDs(m *Model, msgs []tokenizer.ChatMessage) ([]int, error) {
	text, specials, err := chatText(m, msgs)
	if err != nil {
		return nil, err
	}
	return m.Tokenizer.EncodeWith(text, tokenizer.EncodeOptions{AddSpecialTokens: !specials, SplitSpecialTokens: true}), nil
}

// chatText is a conversation as the model reads it: rendered by its
// template (which writes its own special tokens: specials), or the turns'
// contents a paragraph each.
func chatText(m *Model, msgs []tokenizer.ChatMessage) (text string, specials bool, err error) {
	if m.Chat == nil {
		parts := make([]string, len(msgs))
		for i, x := range msgs {
			parts[i] = x.Content
		}
		return strings.Join(parts, "\n\n"), false, nil
	}
	text, err = m.Chat.Render(msgs, true)
	return text, true, err
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// responder writes one request's answer, whole or as server-sent events.
type responder struct {
	s       *Server
	w       http.ResponseWriter
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
}

// pluginResult is the answer's "edgeinfer" extension for a model with
// plugins: the post plugin's result, or why there is none.
func (a *responder) pluginResult(st Stream) map[string]any {
	rs, ok := st.(ResultStream)
	if !a.plugins || !ok {
		return nil
	}
	res, err := rs.Result()
	if err != nil {
		return map[string]any{"result_error": err.Error()}
	}
	return map[string]any{"result": res}
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func usageOf(sum Summary) *usage {
	return &usage{PromptTokens: sum.PromptTokens, CompletionTokens: sum.OutputTokens, TotalTokens: sum.PromptTokens + sum.OutputTokens}
}

// finishReason is OpenAI's spelling of the engine's finish: the end of a
// turn or a stop string are "stop", a token limit is "length".
func finishReason(f Finish) string {
	switch f {
	case FinishLength, FinishContextLength:
		return "length"
	}
	return "stop"
}

// failed reports whether a finish is an error rather than an answer.
func failed(sum Summary) bool {
	return sum.Err != nil || sum.Finish == FinishError || sum.Finish == FinishDeadline || sum.Finish == FinishCancelled || sum.Finish == FinishRejected
}

func (a *responder) summaryError(sum Summary) *apiError {
	if sum.Err != nil {
		return errorOf(sum.Err)
	}
	if sum.Finish == FinishDeadline {
		return &apiError{Status: http.StatusGatewayTimeout, Type: "server_error", Code: strp("deadline_exceeded"),
			Message: "the request's deadline passed before it finished: relax edgeinfer.deadline_ms or ask for fewer tokens"}
	}
	return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: "generation ended with " + string(sum.Finish)}
}

// whole collects the answer and writes one JSON response.
func (a *responder) whole(st Stream) {
	var text strings.Builder
	var ids []int32
	for tok, err := range st.Tokens() {
		if err != nil {
			break
		}
		text.WriteString(tok.Text)
		if a.ids {
			ids = append(ids, tok.ID)
		}
	}
	sum := st.Summary()
	if failed(sum) {
		writeError(a.w, a.summaryError(sum))
		return
	}
	choice := map[string]any{"index": 0, "finish_reason": finishReason(sum.Finish), "logprobs": nil}
	object := "text_completion"
	if a.chat {
		object = "chat.completion"
		choice["message"] = map[string]any{"role": "assistant", "content": text.String()}
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
func (a *responder) stream(st Stream) {
	next, stop := iter.Pull2(st.Tokens())
	defer stop()
	first, err, ok := next()
	if err != nil || !ok {
		if sum := st.Summary(); err != nil || failed(sum) {
			if err == nil {
				err = a.summaryError(sum)
			}
			writeError(a.w, errorOf(err))
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
	for ok {
		if err != nil {
			break
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
	if failed(sum) {
		if sum.Finish != FinishCancelled {
			send(map[string]any{"error": a.summaryError(sum)})
		}
		return
	}
	fin := finishReason(sum.Finish)
	if !send(chunk("", &fin)) {
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
