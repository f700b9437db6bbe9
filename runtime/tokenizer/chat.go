package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// ChatTemplate is a model's Hugging Face chat template (the Jinja text of
// tokenizer_config.json's "chat_template"), compiled once. It renders a
// conversation into the prompt text the model was trained on, exactly as
// Hugging Face's apply_chat_template does (checked byte for byte against
// @huggingface/jinja on the templates of Llama-3, Llama-3.1 (with tools),
// Qwen2.5, Qwen3, Mistral, Mistral Nemo (with tools), Phi-3 and Gemma,
// tools and tool-call round trips included: see chat_test.go).
//
// The Jinja implementation is github.com/ardanlabs/jinja, chosen because
// it is pure Go with no dependencies, maintained for exactly this purpose
// (the templates in GGUF files), and renders every golden case identically
// (TestChatTemplateGolden: 260 of 260; its tojson(indent=N) is replaced,
// see tojsonIndent); BenchmarkChatTemplate measures rendering a four-turn
// conversation. github.com/nikolalohinski/gonja/v2 (v2.9.1), the other
// maintained Go Jinja, matched 112 of the first 128 cases and
// could not parse Gemma 3's template. Its newer releases need Go 1.27;
// v1.8.0 is pinned.
//
// A ChatTemplate is safe for concurrent use.
type ChatTemplate struct {
	src  string
	tmpl *jinja.Template
	bos  string
	eos  string
}

// ChatMessage is one turn of a conversation: OpenAI's message, with what
// tool turns need. An assistant turn that calls tools has ToolCalls (and
// usually no Content); a "tool" turn carries a call's result in Content,
// with the call's ToolCallID and the function's Name.
type ChatMessage struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is one call an assistant turn made: OpenAI's
// {id, type: "function", function: {name, arguments}}.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is a called function's name and its arguments: the JSON
// text of an object, as OpenAI sends it. Unmarshalled from JSON it also
// takes the arguments as an object (Hugging Face's shape), kept as text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// UnmarshalJSON takes arguments as a JSON string (OpenAI) or a JSON value
// (Hugging Face's messages), which is kept as its text.
func (f *FunctionCall) UnmarshalJSON(data []byte) error {
	var raw struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	f.Name, f.Arguments = raw.Name, ""
	a := bytes.TrimSpace(raw.Arguments)
	switch {
	case len(a) == 0 || string(a) == "null":
	case a[0] == '"':
		return json.Unmarshal(a, &f.Arguments)
	default:
		f.Arguments = string(a)
	}
	return nil
}

// ChatTemplateConfig is what a chat template needs from
// tokenizer_config.json.
type ChatTemplateConfig struct {
	// Template is the Jinja source.
	Template string
	// BOSToken and EOSToken are the texts the template sees as
	// bos_token and eos_token ("" when the model has none).
	BOSToken, EOSToken string
}

// NewChatTemplate compiles cfg.Template. A template that does not parse
// gives ErrChatTemplate naming Jinja's complaint.
func NewChatTemplate(cfg ChatTemplateConfig) (*ChatTemplate, error) {
	if strings.TrimSpace(cfg.Template) == "" {
		return nil, fmt.Errorf("%w: empty template", ErrChatTemplate)
	}
	t, err := jinja.Compile(tojsonIndent.ReplaceAllString(cfg.Template, "|"+indentFilter+"(indent="))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrChatTemplate, err)
	}
	return &ChatTemplate{src: cfg.Template, tmpl: t, bos: cfg.BOSToken, eos: cfg.EOSToken}, nil
}

// tojsonIndent finds tojson(indent=N), which Llama-3.1's template prints
// its tools with. github.com/ardanlabs/jinja v1.8.0 writes it through
// encoding/json (keys sorted, <, > and & escaped), unlike Hugging Face
// (keys in the order written, nothing escaped but what JSON needs), so the
// template calls indentFilter instead: the filter below, given to every
// render (a builtin filter cannot be replaced; a name the builtins lack is
// looked up among the variables).
var tojsonIndent = regexp.MustCompile(`\|\s*tojson\s*\(\s*indent\s*=`)

const indentFilter = "edgeinfer_tojson_indent"

// leafJSON is the library's own tojson, for the leaves of an indented
// value (strings, numbers, booleans, none), so they are written exactly as
// without indent.
var leafJSON = sync.OnceValue(func() *jinja.Template {
	t, err := jinja.Compile("{{ v | tojson }}")
	if err != nil {
		panic(err)
	}
	return t
})

// tojsonIndented is Python's json.dumps(v, indent=n) as Hugging Face's
// tojson writes it: keys in the order written, "," at line ends, ": "
// between a key and its value, empty containers as {} and [].
func tojsonIndented(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	n := 0
	if iv, ok := kwargs["indent"]; ok && iv.IsInt() {
		n = int(iv.AsInt())
	}
	var b strings.Builder
	if err := writeIndented(&b, args[0], strings.Repeat(" ", n), ""); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

func writeIndented(b *strings.Builder, v jinja.Value, unit, at string) error {
	inner := at + unit
	switch {
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteString("{")
		for i, k := range d.OrderedKeys() {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n" + inner)
			kj, _ := leafJSON().RenderValues(map[string]jinja.Value{"v": jinja.NewString(k)})
			b.WriteString(kj + ": ")
			x, _ := d.Get(k)
			if err := writeIndented(b, x, unit, inner); err != nil {
				return err
			}
		}
		b.WriteString("\n" + at + "}")
		return nil
	case v.IsList():
		l := v.AsList()
		if l.Len() == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteString("[")
		for i, x := range l.Items {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n" + inner)
			if err := writeIndented(b, x, unit, inner); err != nil {
				return err
			}
		}
		b.WriteString("\n" + at + "]")
		return nil
	}
	out, err := leafJSON().RenderValues(map[string]jinja.Value{"v": v})
	b.WriteString(out)
	return err
}

// Source returns the template's Jinja text.
func (t *ChatTemplate) Source() string { return t.src }

// Render formats msgs. With addGenerationPrompt the text ends with the
// header of an assistant turn, so the model's continuation is the answer.
// A template that refuses the conversation (raise_exception: roles that do
// not alternate, a system message where none is allowed) gives
// ErrChatTemplate with the template's message.
//
// The result carries the template's own special tokens (bos_token
// included where the template writes it): encode it with
// AddSpecialTokens false and SplitSpecialTokens true, as Hugging Face
// does, or the prompt starts with two BOS tokens.
func (t *ChatTemplate) Render(msgs []ChatMessage, addGenerationPrompt bool) (string, error) {
	return t.RenderTools(msgs, nil, addGenerationPrompt)
}

// RenderTools is Render with the tools the model may call: each an
// OpenAI tool object ({"type": "function", "function": {"name",
// "description", "parameters"}}) as JSON, passed to the template as its
// tools variable with its keys in the order written (templates print them
// with tojson, or iterate them). With no tools the variable is not
// defined, as Hugging Face's apply_chat_template leaves it.
//
// Messages reach the template in the shape Hugging Face's templates read:
// {role, content}, plus tool_calls (only where there are some: templates
// test "'tool_calls' in message") as [{id, type, function: {name,
// arguments}}] with arguments as the object its JSON text is (Llama-3.1
// and Qwen2.5 print it with tojson, Mistral prints the whole function),
// tool_call_id and name where set. Content is always a string: an
// assistant turn with tool calls and no content (null, as OpenAI clients
// send it) has content "", since templates such as Llama-3's and Qwen3's
// concatenate or trim it and a none there is an error.
func (t *ChatTemplate) RenderTools(msgs []ChatMessage, tools []json.RawMessage, addGenerationPrompt bool) (string, error) {
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		md := d.AsDict()
		md.Set("role", jinja.NewString(m.Role))
		md.Set("content", jinja.NewString(m.Content))
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				cv := jinja.NewDict()
				cd := cv.AsDict()
				if c.ID != "" {
					cd.Set("id", jinja.NewString(c.ID))
				}
				typ := c.Type
				if typ == "" {
					typ = "function"
				}
				cd.Set("type", jinja.NewString(typ))
				fv := jinja.NewDict()
				fd := fv.AsDict()
				fd.Set("name", jinja.NewString(c.Function.Name))
				args, err := jsonValue([]byte(c.Function.Arguments))
				if err != nil || !args.IsDict() {
					// not an object: the template gets the text itself
					args = jinja.NewString(c.Function.Arguments)
				}
				fd.Set("arguments", args)
				cd.Set("function", fv)
				calls[j] = cv
			}
			md.Set("tool_calls", jinja.NewList(calls))
		}
		if m.ToolCallID != "" {
			md.Set("tool_call_id", jinja.NewString(m.ToolCallID))
		}
		if m.Name != "" {
			md.Set("name", jinja.NewString(m.Name))
		}
		list[i] = d
	}
	vars := map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"add_generation_prompt": jinja.NewBool(addGenerationPrompt),
		"bos_token":             jinja.NewString(t.bos),
		"eos_token":             jinja.NewString(t.eos),
		indentFilter:            jinja.NewCallable(indentFilter, tojsonIndented),
	}
	if len(tools) > 0 {
		tv := make([]jinja.Value, len(tools))
		for i, raw := range tools {
			v, err := jsonValue(raw)
			if err != nil {
				return "", fmt.Errorf("%w: tools[%d]: %v", ErrChatTemplate, i, err)
			}
			tv[i] = v
		}
		vars["tools"] = jinja.NewList(tv)
	}
	out, err := t.tmpl.RenderValues(vars)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrChatTemplate, err)
	}
	return out, nil
}

// jsonValue is a JSON text as a template value, objects keeping their
// keys in the order written (jinja.FromGoValue would sort them) and
// integers staying integers.
func jsonValue(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readJSONValue(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

func readJSONValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := jinja.NewDict()
			dd := d.AsDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				v, err := readJSONValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				dd.Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := readJSONValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %v", x)
	default:
		return jinja.FromGoValue(x), nil
	}
}

// ToolFormat is how a chat template teaches its model to write a tool
// call, so that a server constraining the output makes the model write
// what it was trained to: Qwen2.5/Qwen3 put each call as
// {"name", "arguments"} between "<tool_call>\n" and "\n</tool_call>"
// (parallel calls one after another, a newline between); Llama-3.1 writes
// one {"name", "parameters"} object per turn. A template that says neither
// gets the zero-named format: {"name", "arguments"} JSON, a list of them
// for parallel calls.
type ToolFormat struct {
	// Name is "qwen", "llama3.1" or "" (the plain JSON format).
	Name string `json:"name,omitempty"`
	// Open and Close are written around each call; Sep between calls.
	Open  string `json:"open,omitempty"`
	Close string `json:"close,omitempty"`
	Sep   string `json:"sep,omitempty"`
	// ArgumentsKey is the call's key for its arguments.
	ArgumentsKey string `json:"arguments_key"`
	// Single says the template takes one call per assistant turn.
	Single bool `json:"single,omitempty"`
}

// ToolFormat reads the tool-call format the template teaches (see
// ToolFormat) from the instructions it writes.
func (t *ChatTemplate) ToolFormat() ToolFormat {
	switch {
	case strings.Contains(t.src, "<tool_call>") && strings.Contains(t.src, "arguments"):
		return ToolFormat{Name: "qwen", Open: "<tool_call>\n", Close: "\n</tool_call>", Sep: "\n", ArgumentsKey: "arguments"}
	case strings.Contains(t.src, `"parameters": dictionary of argument name and its value`):
		return ToolFormat{Name: "llama3.1", ArgumentsKey: "parameters", Single: true}
	}
	return ToolFormat{ArgumentsKey: "arguments"}
}

// turnEndProbe is assistant content no template alters (no spaces for
// trim to take, nothing Jinja treats specially).
const turnEndProbe = "edgeinferTurnEndProbe"

// TurnEnd returns what the template writes after an assistant's words:
// the marker the model was trained to emit when its turn is over
// ("<|eot_id|>" for Llama-3, "<|im_end|>" for Qwen, "<end_of_turn>" for
// Gemma, "<|end|>" for Phi-3, eos_token for Mistral). Generation stops on
// it, like on the generation config's end-of-sequence ids, because a
// model's generation config does not always list it (Llama-3 base lists
// only <|end_of_text|>).
//
// specials, when not empty, lists the tokenizer's special tokens: the
// marker is then the first special token after the words. Without them it
// is the first <…> tag there, or the text up to the first white space. "" means the template
// writes nothing recognisable there.
func (t *ChatTemplate) TurnEnd(specials []string) string {
	out, err := t.Render([]ChatMessage{{Role: "user", Content: "u"}, {Role: "assistant", Content: turnEndProbe}}, false)
	if err != nil {
		return ""
	}
	_, after, ok := strings.Cut(out, turnEndProbe)
	if !ok {
		return ""
	}
	after = strings.TrimLeftFunc(after, unicode.IsSpace)
	if len(specials) > 0 {
		best, at := "", len(after)+1
		for _, s := range specials {
			if i := strings.Index(after, s); i >= 0 && (i < at || i == at && len(s) > len(best)) {
				best, at = s, i
			}
		}
		return best
	}
	if strings.HasPrefix(after, "<") {
		if i := strings.IndexByte(after, '>'); i > 0 {
			return after[:i+1]
		}
	}
	if i := strings.IndexFunc(after, unicode.IsSpace); i >= 0 {
		after = after[:i]
	}
	return after
}
