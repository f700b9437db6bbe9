package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// textRequest is the body of /v1/chat/completions and /v1/completions:
// the OpenAI fields the server implements, its extension, and the fields
// that change what is generated which it does not implement (refused with
// 400, never ignored). Other unknown fields are ignored, as
// OpenAI-compatible servers do (clients send fields such as "user").
type textRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	N                   *int            `json:"n"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	RepetitionPenalty   *float64        `json:"repetition_penalty"`
	MinP                *float64        `json:"min_p"`
	ResponseFormat      json.RawMessage `json:"response_format"`
	// Logprobs is a boolean for chat, the number of alternatives for
	// completions (OpenAI's legacy shape).
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs *int            `json:"top_logprobs"`
	Edgeinfer   *extension      `json:"edgeinfer"`
	// Tools, ToolChoice and ParallelToolCalls: tool calls (tools.go).
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`

	// Fields that would change what is generated and that this server
	// refuses with 400 (unsupported lists them with what to send instead).
	Functions       json.RawMessage `json:"functions"`
	FunctionCall    json.RawMessage `json:"function_call"`
	LogitBias       json.RawMessage `json:"logit_bias"`
	BestOf          json.RawMessage `json:"best_of"`
	Echo            json.RawMessage `json:"echo"`
	Suffix          json.RawMessage `json:"suffix"`
	Prediction      json.RawMessage `json:"prediction"`
	Audio           json.RawMessage `json:"audio"`
	Modalities      json.RawMessage `json:"modalities"`
	WebSearch       json.RawMessage `json:"web_search_options"`
	ReasoningEffort json.RawMessage `json:"reasoning_effort"`
	Verbosity       json.RawMessage `json:"verbosity"`
	GuidedJSON      json.RawMessage `json:"guided_json"`
	GuidedRegex     json.RawMessage `json:"guided_regex"`
	GuidedChoice    json.RawMessage `json:"guided_choice"`
	GuidedGrammar   json.RawMessage `json:"guided_grammar"`
	Grammar         json.RawMessage `json:"grammar"`
	JSONSchema      json.RawMessage `json:"json_schema"`
	MinTokens       json.RawMessage `json:"min_tokens"`
	IgnoreEOS       json.RawMessage `json:"ignore_eos"`
	AllowedTokenIDs json.RawMessage `json:"allowed_token_ids"`
	BadWords        json.RawMessage `json:"bad_words"`
}

// unsupported lists the fields of q that would change what is generated
// and that this server does not implement, with what to do instead; a
// field sent with its no-op value (null, false, an empty list, "none") is
// accepted.
func (q *textRequest) unsupported() *apiError {
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		noop []string // values that change nothing
		why  string
	}{
		{"functions", q.Functions, []string{"[]"}, `the deprecated functions are not supported: send them as tools ([{"type": "function", "function": {...}}])`},
		{"function_call", q.FunctionCall, []string{`"none"`, `"auto"`}, "the deprecated function_call is not supported: send tool_choice with tools"},
		{"logit_bias", q.LogitBias, []string{"{}"}, "logit_bias is not supported by this server"},
		{"best_of", q.BestOf, []string{"1"}, "only one completion per request is generated: send best_of = 1 (or omit it)"},
		{"echo", q.Echo, []string{"false"}, "echoing the prompt is not supported: send echo = false (or omit it)"},
		{"suffix", q.Suffix, []string{`""`}, "insertion (a suffix) is not supported by this server"},
		{"prediction", q.Prediction, nil, "predicted outputs are not supported by this server"},
		{"audio", q.Audio, nil, "this server answers with text only"},
		{"modalities", q.Modalities, []string{`["text"]`}, `this server answers with text only: send ["text"] (or omit it)`},
		{"web_search_options", q.WebSearch, nil, "web search is not available on this server"},
		{"reasoning_effort", q.ReasoningEffort, nil, "reasoning effort is not supported by this server"},
		{"verbosity", q.Verbosity, nil, "verbosity is not supported by this server"},
		{"guided_json", q.GuidedJSON, nil, `send response_format {"type": "json_schema", "json_schema": {"name", "schema"}} instead`},
		{"guided_regex", q.GuidedRegex, nil, "regular-expression constraints are not offered over HTTP: send response_format json_schema or json_object"},
		{"guided_choice", q.GuidedChoice, nil, `send response_format json_schema with {"enum": [...]} instead`},
		{"guided_grammar", q.GuidedGrammar, nil, "grammars are not supported: send response_format json_schema or json_object"},
		{"grammar", q.Grammar, nil, "grammars are not supported: send response_format json_schema or json_object"},
		{"json_schema", q.JSONSchema, nil, `send response_format {"type": "json_schema", "json_schema": {"name", "schema"}} instead`},
		{"min_tokens", q.MinTokens, []string{"0"}, "min_tokens is not supported by this server"},
		{"ignore_eos", q.IgnoreEOS, []string{"false"}, "ignore_eos is not supported by this server"},
		{"allowed_token_ids", q.AllowedTokenIDs, nil, "allowed_token_ids is not supported by this server"},
		{"bad_words", q.BadWords, []string{"[]"}, "bad_words is not supported by this server"},
	} {
		v := string(bytes.TrimSpace(f.raw))
		if v == "" || v == "null" {
			continue
		}
		if compact := compactJSON(f.raw); slices.Contains(f.noop, compact) {
			continue
		}
		return withCode(badRequest(f.name, "%s", f.why), "unsupported_parameter")
	}
	return nil
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatMessage's content is a string, an array of parts (only "text"
// parts are understood) or null; an assistant turn may carry the tool
// calls it made, a tool turn the call it answers.
type chatMessage struct {
	Role       string            `json:"role"`
	Content    json.RawMessage   `json:"content"`
	ToolCalls  []engine.ToolCall `json:"tool_calls"`
	ToolCallID string            `json:"tool_call_id"`
	Name       string            `json:"name"`
}

// extension is the request's "edgeinfer" object: priority class, SLO (in
// milliseconds) and fail-fast admission. The same can be sent as headers
// (X-Edgeinfer-Class, X-Edgeinfer-SLO, X-Edgeinfer-Fail-Fast); the body
// wins. KeepAlive is how long the model stays loaded after the request
// (parseKeepAlive).
type extension struct {
	Class      string          `json:"class"`
	TTFTMs     *float64        `json:"ttft_ms"`
	TPOTMs     *float64        `json:"tpot_ms"`
	DeadlineMs *float64        `json:"deadline_ms"`
	FailFast   *bool           `json:"fail_fast"`
	KeepAlive  json.RawMessage `json:"keep_alive"`
}

// decodeJSON reads one JSON value into v, with errors that name the
// field and the byte offset.
func decodeJSON(r io.Reader, v any) error {
	body, err := io.ReadAll(r)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: strp("request_too_large"),
				Message: fmt.Sprintf("the request body exceeds the server's limit of %d bytes: send a shorter prompt (or raise serve --max-body)", mb.Limit)}
		}
		return badRequest("", "reading the request body: %v", err)
	}
	return unmarshalRequest(body, v)
}

func unmarshalRequest(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "the request body is empty: send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return badRequest("", "the request body is not valid JSON at byte %d: %v", se.Offset, se)
		case errors.As(err, &te):
			field := te.Field
			if field == "" {
				return badRequest("", "the request body must be a JSON object, not %s", te.Value)
			}
			return withCode(badRequest(field, "want %s, got a JSON %s", jsonKind(te.Type.String()), te.Value), "invalid_type")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("", "the request body is truncated JSON")
		}
		return badRequest("", "the request body is not valid JSON: %v", err)
	}
	if dec.More() {
		return badRequest("", "the request body has data after its JSON object")
	}
	return nil
}

// jsonKind says a Go type's JSON spelling.
func jsonKind(goType string) string {
	t := strings.TrimLeft(goType, "*")
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	}
	return "an object"
}

// validated is a text request checked and reduced to what the engine
// takes (the prompt as messages, text or ids).
type validated struct {
	model     string
	stream    bool
	usage     bool
	maxTokens int // 0: up to the context
	sampling  *engine.Sampling
	stop      []string
	class     engine.Class
	slo       engine.SLO
	failFast  bool
	keepAlive *time.Duration // nil: the engine's
	messages  []engine.ChatMessage
	prompt    string
	promptIDs []int32
	// constraint is response_format's (nil: text); format its type.
	constraint *engine.Constraint
	format     string
	// logprobs and topLogprobs ask for each token's log-probability and
	// its most likely alternatives.
	logprobs    bool
	topLogprobs int
	// tools are the request's tools and tool_choice (nil: none sent).
	tools *tooling
}

var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// validate checks the fields common to both endpoints, then the chat
// messages (chat) or the prompt (completions).
func (q *textRequest) validate(chat bool, h http.Header) (*validated, error) {
	v := &validated{model: q.Model, stream: q.Stream}
	if q.Model == "" {
		return nil, badRequest("model", "required: name one of GET /v1/models")
	}
	if q.StreamOptions != nil {
		v.usage = q.StreamOptions.IncludeUsage
	}
	if q.N != nil && *q.N != 1 {
		return nil, withCode(badRequest("n", "only 1 choice per request is supported, got %d: send n = 1 (or omit it) and repeat the request", *q.N), "unsupported_value")
	}
	if err := q.unsupported(); err != nil {
		return nil, err
	}
	if err := v.responseFormat(q.ResponseFormat); err != nil {
		return nil, err
	}
	if err := v.readLogprobs(q, chat); err != nil {
		return nil, err
	}
	mt := q.MaxTokens
	name := "max_tokens"
	if q.MaxCompletionTokens != nil {
		mt, name = q.MaxCompletionTokens, "max_completion_tokens"
	}
	if mt != nil {
		if *mt < 1 {
			return nil, badRequest(name, "must be ≥ 1, got %d", *mt)
		}
		v.maxTokens = *mt
	}
	if q.Temperature != nil || q.TopP != nil || q.TopK != nil || q.Seed != nil || q.PresencePenalty != nil ||
		q.FrequencyPenalty != nil || q.RepetitionPenalty != nil || q.MinP != nil {
		s := &engine.Sampling{Temperature: 1, TopP: 1}
		for _, p := range []struct {
			name string
			v    *float64
			dst  *float32
		}{{"presence_penalty", q.PresencePenalty, &s.PresencePenalty}, {"frequency_penalty", q.FrequencyPenalty, &s.FrequencyPenalty}} {
			if p.v == nil {
				continue
			}
			if *p.v < -2 || *p.v > 2 {
				return nil, badRequest(p.name, "must be in [-2, 2], got %g", *p.v)
			}
			*p.dst = float32(*p.v)
		}
		if r := q.RepetitionPenalty; r != nil {
			if *r <= 0 {
				return nil, badRequest("repetition_penalty", "must be > 0 (1 disables it), got %g", *r)
			}
			s.RepetitionPenalty = float32(*r)
		}
		if m := q.MinP; m != nil {
			if *m < 0 || *m > 1 {
				return nil, badRequest("min_p", "must be in [0, 1], got %g", *m)
			}
			s.MinP = float32(*m)
		}
		if t := q.Temperature; t != nil {
			if *t < 0 || *t > 2 {
				return nil, badRequest("temperature", "must be in [0, 2], got %g", *t)
			}
			s.Temperature = float32(*t)
		}
		if p := q.TopP; p != nil {
			if *p <= 0 || *p > 1 {
				return nil, badRequest("top_p", "must be in (0, 1], got %g", *p)
			}
			s.TopP = float32(*p)
		}
		if k := q.TopK; k != nil {
			if *k < 0 {
				return nil, badRequest("top_k", "must be ≥ 0 (0 keeps every token), got %d", *k)
			}
			s.TopK = *k
		}
		if sd := q.Seed; sd != nil {
			if *sd < 0 {
				return nil, badRequest("seed", "must be ≥ 0, got %d", *sd)
			}
			s.Seed = uint64(*sd)
		}
		v.sampling = s
	}
	stop, err := stringOrList(q.Stop, "stop", 4)
	if err != nil {
		return nil, err
	}
	for i, s := range stop {
		if s == "" {
			return nil, badRequest(fmt.Sprintf("stop[%d]", i), "must not be empty")
		}
	}
	v.stop = stop
	if err := v.priority(q.Edgeinfer, h); err != nil {
		return nil, err
	}
	if chat {
		if v.tools, err = readTools(q); err != nil {
			return nil, err
		}
		if v.tools.calls() {
			if v.format != "" && v.format != "text" {
				return nil, withCode(badRequest("response_format", "%s with tools is not supported: a tool call is JSON of the tool's parameters already; send tool_choice \"none\" to have a %s answer", v.format, v.format), "unsupported_value")
			}
		}
		if q.Prompt != nil {
			return nil, badRequest("prompt", "belongs to /v1/completions: send messages to /v1/chat/completions")
		}
		if len(q.Messages) == 0 {
			return nil, badRequest("messages", "required: at least one {role, content}")
		}
		for i, m := range q.Messages {
			if !roles[m.Role] {
				return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "%q is not one of system, developer, user, assistant, tool", m.Role)
			}
			text, err := contentText(m.Content, fmt.Sprintf("messages[%d].content", i))
			if err != nil {
				return nil, err
			}
			if len(m.ToolCalls) > 0 && m.Role != "assistant" {
				return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls", i), "only assistant messages carry tool calls")
			}
			for j, c := range m.ToolCalls {
				field := fmt.Sprintf("messages[%d].tool_calls[%d]", i, j)
				if c.Type != "" && c.Type != "function" {
					return nil, withCode(badRequest(field+".type", "%q is not supported: tool calls are functions", c.Type), "unsupported_value")
				}
				if c.Function.Name == "" {
					return nil, badRequest(field+".function.name", "required")
				}
				if a := strings.TrimSpace(c.Function.Arguments); a != "" && !json.Valid([]byte(a)) {
					return nil, badRequest(field+".function.arguments", "not valid JSON: %q", a)
				}
			}
			if m.Role == "tool" && m.ToolCallID == "" {
				return nil, badRequest(fmt.Sprintf("messages[%d].tool_call_id", i), "required in a tool message: the id of the call it answers")
			}
			v.messages = append(v.messages, engine.ChatMessage{Role: m.Role, Content: text, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name})
		}
		return v, nil
	}
	if t, err := readTools(q); err != nil {
		return nil, err
	} else if t != nil {
		return nil, badRequest("tools", "belong to /v1/chat/completions: tool calls need a chat")
	}
	if q.Messages != nil {
		return nil, badRequest("messages", "belong to /v1/chat/completions: send prompt to /v1/completions")
	}
	return v, v.readPrompt(q.Prompt)
}

// responseFormat reads response_format: text, json_object or json_schema
// (its schema compiled here, so a schema the server cannot honour is a 400
// naming the construct before anything runs).
func (v *validated) responseFormat(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var rf struct {
		Type       *string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return badRequest("response_format", "want {\"type\": \"text\" | \"json_object\" | \"json_schema\", \"json_schema\": {\"name\", \"schema\", \"strict\"}}")
	}
	if rf.Type == nil {
		return badRequest("response_format.type", "required: text, json_object or json_schema")
	}
	v.format = *rf.Type
	switch *rf.Type {
	case "text":
		return nil
	case "json_object":
		v.constraint = engine.JSON()
		return nil
	case "json_schema":
		js := rf.JSONSchema
		if js == nil {
			return badRequest("response_format.json_schema", "required with type json_schema: {\"name\", \"schema\", \"strict\"}")
		}
		if len(js.Schema) == 0 || string(js.Schema) == "null" {
			return badRequest("response_format.json_schema.schema", "required: the JSON Schema the answer must follow")
		}
		c, err := engine.JSONSchema(js.Schema)
		if err != nil {
			return withCode(badRequest("response_format.json_schema.schema", "%v", err), "unsupported_schema")
		}
		v.constraint = c
		return nil
	}
	return withCode(badRequest("response_format.type", "%q is not supported: send text, json_object or json_schema", *rf.Type), "unsupported_value")
}

// readLogprobs reads logprobs and top_logprobs: for chat a boolean and a
// count (0 to 20); for completions (OpenAI's legacy shape) logprobs is the
// count itself (0 to 5).
func (v *validated) readLogprobs(q *textRequest, chat bool) error {
	raw := bytes.TrimSpace(q.Logprobs)
	if chat {
		if len(raw) > 0 && string(raw) != "null" {
			if err := json.Unmarshal(raw, &v.logprobs); err != nil {
				return withCode(badRequest("logprobs", "want true or false"), "invalid_type")
			}
		}
		if t := q.TopLogprobs; t != nil {
			if *t < 0 || *t > engine.MaxTopLogProbs {
				return badRequest("top_logprobs", "must be in [0, %d], got %d", engine.MaxTopLogProbs, *t)
			}
			if !v.logprobs && *t > 0 {
				return badRequest("top_logprobs", "needs logprobs: true")
			}
			v.topLogprobs = *t
		}
		return nil
	}
	if q.TopLogprobs != nil {
		return badRequest("top_logprobs", "belongs to /v1/chat/completions: /v1/completions takes logprobs as the number of alternatives (0 to 5)")
	}
	if len(raw) > 0 && string(raw) != "null" {
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			return withCode(badRequest("logprobs", "want the number of alternatives per token (0 to 5)"), "invalid_type")
		}
		if n < 0 || n > 5 {
			return badRequest("logprobs", "must be in [0, 5], got %d", n)
		}
		v.logprobs, v.topLogprobs = true, n
	}
	return nil
}

// readPrompt takes a completion prompt: a string, a list of one string,
// or a list of token ids.
func (v *validated) readPrompt(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return badRequest("prompt", "required: a string (or a list of token ids)")
	}
	if err := json.Unmarshal(raw, &v.prompt); err == nil {
		return nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		if len(list) != 1 {
			return withCode(badRequest("prompt", "one prompt per request is supported, got %d: send them as separate requests", len(list)), "unsupported_value")
		}
		v.prompt = list[0]
		return nil
	}
	var ids []int32
	if err := json.Unmarshal(raw, &ids); err == nil && len(ids) > 0 {
		v.promptIDs = ids
		return nil
	}
	return badRequest("prompt", "want a string, a list of one string or a list of token ids")
}

func stringOrList(raw json.RawMessage, field string, most int) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest(field, "want a string or a list of strings")
	}
	if len(list) > most {
		return nil, badRequest(field, "at most %d, got %d", most, len(list))
	}
	return list, nil
}

// contentText reads a message's content: a string, null, or text parts.
func contentText(raw json.RawMessage, field string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(field, "want a string or a list of {type: text, text} parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", withCode(badRequest(fmt.Sprintf("%s[%d].type", field, i), "%q parts are not supported: this server takes text only", p.Type), "unsupported_value")
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// priority reads the class and SLO from the extension object, else from
// the headers.
func (v *validated) priority(x *extension, h http.Header) error {
	class := h.Get("X-Edgeinfer-Class")
	if x != nil && x.Class != "" {
		class = x.Class
	}
	var err error
	if v.class, err = engine.ParseClass(class); err != nil {
		return badRequest("edgeinfer.class", "%q is not one of realtime, interactive, batch", class)
	}
	if hs := h.Get("X-Edgeinfer-SLO"); hs != "" {
		for _, kv := range strings.Split(hs, ",") {
			k, val, _ := strings.Cut(strings.TrimSpace(kv), "=")
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 {
				return badRequest("X-Edgeinfer-SLO", "%q: want ttft=DURATION,tpot=DURATION,deadline=DURATION (Go durations: 300ms, 5s)", kv)
			}
			switch k {
			case "ttft":
				v.slo.TTFT = d
			case "tpot":
				v.slo.TPOT = d
			case "deadline":
				v.slo.Deadline = d
			default:
				return badRequest("X-Edgeinfer-SLO", "unknown objective %q (want ttft, tpot or deadline)", k)
			}
		}
	}
	if ff := h.Get("X-Edgeinfer-Fail-Fast"); ff != "" {
		v.failFast = ff == "1" || strings.EqualFold(ff, "true")
	}
	if x == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		ms   *float64
		dst  *time.Duration
	}{{"edgeinfer.ttft_ms", x.TTFTMs, &v.slo.TTFT}, {"edgeinfer.tpot_ms", x.TPOTMs, &v.slo.TPOT}, {"edgeinfer.deadline_ms", x.DeadlineMs, &v.slo.Deadline}} {
		if f.ms == nil {
			continue
		}
		if *f.ms < 0 {
			return badRequest(f.name, "must be ≥ 0 (0 = unbounded), got %g", *f.ms)
		}
		*f.dst = time.Duration(*f.ms * float64(time.Millisecond))
	}
	if x.FailFast != nil {
		v.failFast = *x.FailFast
	}
	v.keepAlive, err = parseKeepAlive(x.KeepAlive) // resident.go
	return err
}
