package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// Tool calls (OpenAI's tools, tool_choice and parallel_tool_calls).
//
// The tools go to the chat template's tools variable, so a model trained
// for tool calls reads them as it was trained to. What it writes is
// constrained: with tool_choice "required" or a named function the output
// is JSON the calls' schema accepts, built from the tools:
//
//	{"name": <a tool's name>, "arguments": <that tool's parameters>}
//
// as an anyOf over the tools (each name paired with its own arguments
// schema); with parallel_tool_calls (the default) an array of one or more
// such calls is also allowed. The JSON is parsed into message.tool_calls
// (arguments re-sent as the JSON text the model wrote, which the grammar
// kept valid against the tool's parameters).
//
// The model writes its calls in the format its chat template teaches
// (engine.ModelInfo.ToolFormat), so that the prompt and the constrained
// output agree: Qwen2.5/Qwen3 each call between "<tool_call>\n" and
// "\n</tool_call>", parallel calls one after another; Llama-3.1 one
// {"name", "parameters"} object per turn (its template refuses more). A
// template that teaches neither, or none, gets the JSON above. Mistral's
// [TOOL_CALLS] is a control token the grammar cannot write, so Mistral
// models get the JSON too (TestToolCallsInTheModelsFormat checks the
// tokens written for Qwen3's and Llama-3.1's templates).
//
// With "auto" the model may answer in text or call: the constraint is
// engine.JSONSchemaOrText of the same schema (engine.JSONSchemaFramed with
// OrText for a framed format), whose alternatives are the calls from the
// first byte, or text whose first character that is not white space is
// neither '{' nor '[' (nor the frame's '<'). The first character decides,
// and an output that begins as a call is always a complete, valid call
// when it ends; text past its first character is free. This is honest
// about what the model chose (nothing is guessed out of free text) at the
// cost of answers that begin with '{' or '[' (or '<') when "auto" is
// asked.
//
// With "none" the tools are rendered but nothing is constrained or parsed.

// toolNamePattern is OpenAI's rule for a function's name.
var toolNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// tooling is a request's tools, checked.
type tooling struct {
	tools    []json.RawMessage // as sent, for the template
	names    []string
	params   []json.RawMessage // each tool's arguments schema
	choice   string            // "none", "auto", "required" or "function"
	named    string            // the function tool_choice names
	parallel bool
	// format is how the model's chat template teaches it to write a call
	// (set once the model is known: forModel).
	format tokenizer.ToolFormat
}

// forModel sets the call format to the model's (ModelInfo.ToolFormat; a
// model without a chat template has the zero format, the plain JSON) and
// returns the constraint of what the model may write: nil with
// tool_choice none.
func (t *tooling) forModel(f tokenizer.ToolFormat) (*engine.Constraint, error) {
	if f.ArgumentsKey == "" {
		f.ArgumentsKey = "arguments"
	}
	t.format = f
	switch {
	case t.choice == "none":
		return nil, nil
	case f.Open != "":
		return engine.JSONSchemaFramed(t.schema(), engine.Frame{Open: f.Open, Close: f.Close, Sep: f.Sep, Many: t.many(), OrText: t.choice == "auto"})
	case t.choice == "auto":
		return engine.JSONSchemaOrText(t.schema())
	}
	return engine.JSONSchema(t.schema())
}

// many reports whether one answer may hold several calls.
func (t *tooling) many() bool { return t.parallel && !t.format.Single }

// calls reports whether the model may (or must) call a tool.
func (t *tooling) calls() bool { return t != nil && t.choice != "none" }

// readTools checks tools, tool_choice and parallel_tool_calls.
func readTools(q *textRequest) (*tooling, error) {
	raw := bytes.TrimSpace(q.Tools)
	choiceRaw := bytes.TrimSpace(q.ToolChoice)
	hasTools := len(raw) > 0 && string(raw) != "null" && compactJSON(raw) != "[]"
	if !hasTools {
		if len(choiceRaw) > 0 && string(choiceRaw) != "null" && !slices.Contains([]string{`"none"`, `"auto"`}, compactJSON(choiceRaw)) {
			return nil, badRequest("tool_choice", "needs tools: send the functions the model may call in tools")
		}
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, withCode(badRequest("tools", `want a list of {"type": "function", "function": {"name", "description", "parameters"}}`), "invalid_type")
	}
	t := &tooling{tools: list, choice: "auto", parallel: true}
	seen := map[string]bool{}
	for i, rt := range list {
		field := fmt.Sprintf("tools[%d]", i)
		var tool struct {
			Type     string `json:"type"`
			Function *struct {
				Name        string          `json:"name"`
				Description json.RawMessage `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
				Strict      json.RawMessage `json:"strict"`
			} `json:"function"`
		}
		if err := json.Unmarshal(rt, &tool); err != nil {
			return nil, withCode(badRequest(field, `want {"type": "function", "function": {"name", "description", "parameters"}}`), "invalid_type")
		}
		if tool.Type != "function" {
			return nil, withCode(badRequest(field+".type", "%q is not supported: this server calls functions only (\"function\")", tool.Type), "unsupported_value")
		}
		f := tool.Function
		if f == nil {
			return nil, badRequest(field+".function", "required: {\"name\", \"description\", \"parameters\"}")
		}
		if !toolNamePattern.MatchString(f.Name) {
			return nil, badRequest(field+".function.name", "%q: want 1 to 64 letters, digits, _ or -", f.Name)
		}
		if seen[f.Name] {
			return nil, badRequest(field+".function.name", "%q names two tools: names must be unique", f.Name)
		}
		seen[f.Name] = true
		params := bytes.TrimSpace(f.Parameters)
		if len(params) == 0 || string(params) == "null" {
			// OpenAI: "omitting parameters defines a function with an
			// empty parameter list"
			params = []byte(`{"type":"object","properties":{},"additionalProperties":false}`)
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(params, &top) != nil {
			return nil, badRequest(field+".function.parameters", "tool %q: the parameters must be a JSON Schema object", f.Name)
		}
		if ty, ok := top["type"]; ok && compactJSON(ty) != `"object"` {
			return nil, withCode(badRequest(field+".function.parameters", "tool %q: the parameters must describe an object (\"type\": \"object\"), got type %s", f.Name, ty), "unsupported_schema")
		}
		if _, err := engine.JSONSchema(params); err != nil {
			return nil, withCode(badRequest(field+".function.parameters", "tool %q: %v", f.Name, err), "unsupported_schema")
		}
		t.names = append(t.names, f.Name)
		t.params = append(t.params, json.RawMessage(params))
	}
	if p := q.ParallelToolCalls; p != nil {
		t.parallel = *p
	}
	if len(choiceRaw) > 0 && string(choiceRaw) != "null" {
		var s string
		if json.Unmarshal(choiceRaw, &s) == nil {
			switch s {
			case "none", "auto", "required":
				t.choice = s
			default:
				return nil, withCode(badRequest("tool_choice", "%q is not one of none, auto, required (or {\"type\": \"function\", \"function\": {\"name\"}})", s), "unsupported_value")
			}
		} else {
			var c struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(choiceRaw, &c); err != nil || c.Type != "function" {
				return nil, badRequest("tool_choice", `want "none", "auto", "required" or {"type": "function", "function": {"name"}}`)
			}
			if !seen[c.Function.Name] {
				return nil, badRequest("tool_choice.function.name", "%q is not one of the tools", c.Function.Name)
			}
			t.choice, t.named = "function", c.Function.Name
		}
	}
	return t, nil
}

// schema is the JSON Schema of what the model writes when it calls: one
// call {"name", "arguments"} (anyOf over the tools, or the named one; the
// model's format may name the arguments "parameters"), or with parallel
// calls in the plain format also an array of one or more (a framed format
// repeats the frame instead). Each tool's
// parameters sit in $defs (their own $refs rewritten to point there).
func (t *tooling) schema() []byte {
	defs := map[string]json.RawMessage{}
	var one []string
	for i, name := range t.names {
		if t.choice == "function" && name != t.named {
			continue
		}
		key := fmt.Sprintf("tool%d", i)
		defs[key] = rebaseRefs(t.params[i], "#/$defs/"+key)
		n, _ := json.Marshal(name)
		args, _ := json.Marshal(t.format.ArgumentsKey)
		one = append(one, fmt.Sprintf(`{"type":"object","properties":{"name":{"const":%s},%s:{"$ref":"#/$defs/%s"}},"required":["name",%s],"additionalProperties":false}`, n, args, key, args))
	}
	call := one[0]
	if len(one) > 1 {
		call = `{"anyOf":[` + strings.Join(one, ",") + `]}`
	}
	if t.many() && t.format.Open == "" {
		call = `{"anyOf":[` + call + `,{"type":"array","items":` + call + `,"minItems":1}]}`
	}
	d, _ := json.Marshal(defs)
	// the call's own keys come after $defs, so "anyOf"/"type" stay with it
	return []byte(`{"$defs":` + string(d) + `,` + strings.TrimPrefix(call, "{"))
}

// rebaseRefs rewrites a schema's local references (#/…) to point inside
// base, where the schema now sits; enum, const, default and examples are
// values, left alone.
func rebaseRefs(schema json.RawMessage, base string) json.RawMessage {
	var v any
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return schema
	}
	var walk func(x any) any
	walk = func(x any) any {
		switch n := x.(type) {
		case map[string]any:
			for k, val := range n {
				switch k {
				case "enum", "const", "default", "examples":
					continue
				case "$ref":
					if s, ok := val.(string); ok && strings.HasPrefix(s, "#") {
						n[k] = base + s[1:]
						continue
					}
				}
				n[k] = walk(val)
			}
		case []any:
			for i := range n {
				n[i] = walk(n[i])
			}
		}
		return x
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return schema
	}
	return out
}

// toolCall is one call in an answer, in OpenAI's shape.
type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// isCall reports whether an output is calls (its first character that is
// not white space begins a call: '{' or '[', or the format's frame): under
// the constraint, text never begins so.
func (t *tooling) isCall(text string) bool {
	s := strings.TrimLeft(text, " \t\r\n")
	if s == "" {
		return false
	}
	if o := t.format.Open; o != "" {
		return s[0] == o[0]
	}
	return s[0] == '{' || s[0] == '['
}

// parseCalls reads the model's calls: one {"name", "arguments"} or a list
// of them, or framed calls one after another. An output cut short
// (max_tokens, a stop string) does not parse.
func (t *tooling) parseCalls(text string) ([]toolCall, bool) {
	var list []map[string]json.RawMessage
	s := strings.TrimSpace(text)
	switch f := t.format; {
	case f.Open != "":
		open, closing := strings.TrimSpace(f.Open), strings.TrimSpace(f.Close)
		for s != "" {
			rest, ok := strings.CutPrefix(s, open)
			if !ok {
				return nil, false
			}
			// the call is read as one JSON value, so a "</tool_call>" inside
			// one of its strings does not end it
			dec := json.NewDecoder(strings.NewReader(rest))
			var one map[string]json.RawMessage
			if dec.Decode(&one) != nil {
				return nil, false
			}
			after, ok := strings.CutPrefix(strings.TrimSpace(rest[dec.InputOffset():]), closing)
			if !ok {
				return nil, false
			}
			list, s = append(list, one), strings.TrimSpace(after)
		}
	case strings.HasPrefix(s, "["):
		if json.Unmarshal([]byte(s), &list) != nil {
			return nil, false
		}
	default:
		var one map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &one) != nil {
			return nil, false
		}
		list = []map[string]json.RawMessage{one}
	}
	if len(list) == 0 {
		return nil, false
	}
	out := make([]toolCall, len(list))
	for i, c := range list {
		var name string
		args := c[t.format.ArgumentsKey]
		if json.Unmarshal(c["name"], &name) != nil || name == "" || len(args) == 0 {
			return nil, false
		}
		out[i] = toolCall{ID: newID("call_"), Type: "function"}
		out[i].Function.Name, out[i].Function.Arguments = name, compactJSON(args)
	}
	return out, true
}

// callStream turns a streamed output into OpenAI's deltas: text as
// content, calls as tool_calls deltas (the first for index i with id,
// type, function.name and arguments "", then the arguments in fragments as
// they are written). It relies on the shape the constraint writes:
// {"name":"N","arguments":A} with names that need no escape.
type callStream struct {
	auto    bool
	open    byte           // the first byte of a call: '{' or the frame's
	head    *regexp.Regexp // what precedes a call's arguments
	mode    int            // 0: undecided, 1: text, 2: calls
	state   int            // calls: 0 between calls, 1 in the head, 2 in the arguments, 3 after them
	text    []byte         // the call's text up to its arguments
	depth   int            // the arguments' nesting
	inStr   bool
	esc     bool
	scalar  bool // the arguments are not an object or array
	started bool // the arguments' value began
	index   int  // calls begun
}

// newCallStream reads the calls of t's format as they are written.
func (t *tooling) newCallStream() *callStream {
	c := &callStream{auto: t.choice == "auto", open: '{',
		head: regexp.MustCompile(`^\{"name":"([A-Za-z0-9_-]+)",` + regexp.QuoteMeta(strconv.Quote(t.format.ArgumentsKey)) + `:$`)}
	if o := t.format.Open; o != "" {
		c.open = o[0]
	}
	return c
}

// feed takes the next text and returns the content to send and the
// tool_calls deltas.
func (c *callStream) feed(text string) (content string, deltas []map[string]any) {
	var args []byte
	flush := func() {
		if len(args) > 0 {
			deltas = append(deltas, map[string]any{"index": c.index - 1, "function": map[string]any{"arguments": string(args)}})
			args = nil
		}
	}
	for i := 0; i < len(text); i++ {
		b := text[i]
		if c.mode == 0 {
			switch {
			case b == c.open || (c.open == '{' && b == '['):
				c.mode = 2
			case !c.auto:
				c.mode = 2 // required: only calls are written
			default:
				c.mode = 1
			}
		}
		if c.mode == 1 {
			return content + text[i:], deltas
		}
		switch c.state {
		case 0:
			if b == '{' {
				c.state, c.text = 1, append(c.text[:0], b)
			}
		case 1:
			c.text = append(c.text, b)
			if m := c.head.FindSubmatch(c.text); m != nil {
				c.index++
				deltas = append(deltas, map[string]any{"index": c.index - 1, "id": newID("call_"), "type": "function",
					"function": map[string]any{"name": string(m[1]), "arguments": ""}})
				c.state, c.depth, c.inStr, c.esc, c.scalar, c.started = 2, 0, false, false, false, false
			}
		case 2:
			if !c.inStr && c.depth == 0 && b == '}' && c.started {
				// a scalar's end: the call's closing brace
				flush()
				c.state = 0
				continue
			}
			args = append(args, b)
			switch {
			case c.inStr && c.esc:
				c.esc = false
			case c.inStr && b == '\\':
				c.esc = true
			case c.inStr && b == '"':
				c.inStr = false
			case c.inStr:
			case b == '"':
				c.inStr = true
			case b == '{' || b == '[':
				c.depth++
			case b == '}' || b == ']':
				c.depth--
			}
			if !c.started {
				c.started, c.scalar = true, b != '{' && b != '['
			}
			if !c.scalar && c.depth == 0 {
				flush()
				c.state = 3
			}
		case 3:
			if b == '}' {
				c.state = 0
			}
		}
	}
	flush()
	return content, deltas
}
