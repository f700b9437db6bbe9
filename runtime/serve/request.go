package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// textRequest is the body of /v1/chat/completions and /v1/completions:
// the OpenAI fields the server implements, and its extension. Unknown
// fields are ignored, as OpenAI-compatible servers do (clients send
// fields such as "user").
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
	Edgeinfer           *extension      `json:"edgeinfer"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatMessage's content is a string, an array of parts (only "text"
// parts are understood) or null.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// extension is the request's "edgeinfer" object: priority class, SLO (in
// milliseconds) and fail-fast admission. The same can be sent as headers
// (X-Edgeinfer-Class, X-Edgeinfer-SLO, X-Edgeinfer-Fail-Fast); the body
// wins.
type extension struct {
	Class      string   `json:"class"`
	TTFTMs     *float64 `json:"ttft_ms"`
	TPOTMs     *float64 `json:"tpot_ms"`
	DeadlineMs *float64 `json:"deadline_ms"`
	FailFast   *bool    `json:"fail_fast"`
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
	messages  []engine.ChatMessage
	prompt    string
	promptIDs []int32
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
	if q.Temperature != nil || q.TopP != nil || q.TopK != nil || q.Seed != nil {
		s := &engine.Sampling{Temperature: 1, TopP: 1}
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
			v.messages = append(v.messages, engine.ChatMessage{Role: m.Role, Content: text})
		}
		return v, nil
	}
	if q.Messages != nil {
		return nil, badRequest("messages", "belong to /v1/chat/completions: send prompt to /v1/completions")
	}
	return v, v.readPrompt(q.Prompt)
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
	return nil
}
