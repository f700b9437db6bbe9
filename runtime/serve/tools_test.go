package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/internal/grammar/grammartest"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// testTools are three functions: plain properties, an enum and bounds,
// and $defs/$ref (which the calls' schema moves under its own $defs).
var testTools = map[string]string{
	"get_weather": `{"type":"object","properties":{"city":{"type":"string","maxLength":24},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"],"additionalProperties":false}`,
	"lot_status":  `{"type":"object","properties":{"lot":{"type":"integer","minimum":1,"maximum":9999},"verbose":{"type":"boolean"}},"required":["lot"],"additionalProperties":false}`,
	"set_route": `{"type":"object","$defs":{"stop":{"type":"object","properties":{"station":{"type":"string","enum":["press","paint","pack"]},"minutes":{"type":"integer","minimum":0,"maximum":90}},"required":["station","minutes"],"additionalProperties":false}},` +
		`"properties":{"stops":{"type":"array","items":{"$ref":"#/$defs/stop"},"minItems":1,"maxItems":3}},"required":["stops"],"additionalProperties":false}`,
}

var testToolNames = []string{"get_weather", "lot_status", "set_route"}

func toolsJSON(names ...string) string {
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf(`{"type":"function","function":{"name":%q,"description":"the %s tool","parameters":%s}}`, n, n, testTools[n]))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// answer is a chat answer's calls (assembled from the deltas when
// streamed), content and finish reason.
type answer struct {
	calls   []toolCall
	content *string
	finish  string
}

func readAnswer(t *testing.T, stream bool, data []byte) answer {
	t.Helper()
	var a answer
	if !stream {
		var r struct {
			Choices []struct {
				Message struct {
					Content   *string    `json:"content"`
					ToolCalls []toolCall `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(data, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("answer %s: %v", data, err)
		}
		c := r.Choices[0]
		return answer{calls: c.Message.ToolCalls, content: c.Message.Content, finish: c.FinishReason}
	}
	var content strings.Builder
	for _, ev := range sseEvents(t, data) {
		c := choice0(ev)
		if c == nil {
			continue
		}
		if f, ok := c["finish_reason"].(string); ok {
			a.finish = f
		}
		d, _ := c["delta"].(map[string]any)
		if s, ok := d["content"].(string); ok {
			content.WriteString(s)
		}
		tcs, _ := d["tool_calls"].([]any)
		for _, x := range tcs {
			tc := x.(map[string]any)
			i := int(tc["index"].(float64))
			fn, _ := tc["function"].(map[string]any)
			if id, ok := tc["id"].(string); ok {
				if i != len(a.calls) || tc["type"] != "function" || fn["arguments"] != "" {
					t.Fatalf("first delta of call %d: %v", i, tc)
				}
				a.calls = append(a.calls, toolCall{ID: id, Type: "function"})
				a.calls[i].Function.Name = fn["name"].(string)
				continue
			}
			if i != len(a.calls)-1 || fn["name"] != nil {
				t.Fatalf("delta for call %d: %v", i, tc)
			}
			a.calls[i].Function.Arguments += fn["arguments"].(string)
		}
	}
	s := content.String()
	a.content = &s
	return a
}

// 200 generated tool calls on the tiny model, whole and streamed, with
// required, a named function and parallel calls: every call names a tool
// that was offered, and its arguments parse and validate against that
// tool's schema; ids are unique, finish_reason is tool_calls and content
// null.
func TestToolCallsValid(t *testing.T) {
	f := openFixture(t, Config{})
	const n = 200
	var mu sync.Mutex
	calls, valid, answers := 0, 0, 0
	ids := map[string]bool{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			stream := i%2 == 1
			// tinychat's template ignores the tools; tinylm has none, so
			// the tools are paragraphs of its prompt: one fits its
			// 256-token context
			model := "tinychat"
			choice := `"required"`
			offered := testToolNames
			switch i % 5 {
			case 1:
				choice = fmt.Sprintf(`{"type":"function","function":{"name":%q}}`, testToolNames[i%3])
			case 2:
				offered = []string{testToolNames[i%2]}
				model = "tinylm"
			}
			parallel := i%3 != 0
			body := fmt.Sprintf(`{"model":%q,"max_tokens":72,"temperature":1,"seed":%d,"stream":%v,"messages":[{"role":"user","content":"Task %d"}],"tools":%s,"tool_choice":%s,"parallel_tool_calls":%v}`,
				model, i, stream, i, toolsJSON(offered...), choice, parallel)
			resp, data := f.post(t, "/v1/chat/completions", body)
			if resp.StatusCode != 200 {
				t.Errorf("%d: %s", resp.StatusCode, data)
				return
			}
			a := readAnswer(t, stream, data)
			mu.Lock()
			defer mu.Unlock()
			answers++
			if a.finish != "tool_calls" || len(a.calls) == 0 || (!stream && a.content != nil) || (stream && *a.content != "") {
				t.Errorf("answer %d (stream %v): finish %q, %d calls, content %v: %s", i, stream, a.finish, len(a.calls), a.content, data)
				return
			}
			if !parallel && len(a.calls) != 1 {
				t.Errorf("answer %d: parallel_tool_calls false gave %d calls", i, len(a.calls))
			}
			for _, c := range a.calls {
				calls++
				if !strings.HasPrefix(c.ID, "call_") || ids[c.ID] || c.Type != "function" {
					t.Errorf("call id %q type %q (repeated: %v)", c.ID, c.Type, ids[c.ID])
				}
				ids[c.ID] = true
				schema, ok := testTools[c.Function.Name]
				if !ok || !strings.Contains(toolsJSON(offered...), `"`+c.Function.Name+`"`) {
					t.Errorf("answer %d calls %q, not offered", i, c.Function.Name)
					continue
				}
				if strings.Contains(choice, "function") && !strings.Contains(choice, `"`+c.Function.Name+`"`) {
					t.Errorf("answer %d calls %q, not the named function %s", i, c.Function.Name, choice)
					continue
				}
				if err := grammartest.Validate([]byte(schema), []byte(c.Function.Arguments)); err != nil {
					t.Errorf("answer %d: %s(%s): %v", i, c.Function.Name, c.Function.Arguments, err)
					continue
				}
				valid++
			}
		}()
	}
	wg.Wait()
	if answers != n || valid != calls {
		t.Fatalf("%d answers of %d; %d of %d calls valid", answers, n, valid, calls)
	}
	t.Logf("%d answers, %d tool calls, %d valid (arguments parse and validate against their tool's schema)", answers, calls, valid)
}

// A tool the server cannot honour is a 400 naming the tool and the
// construct; so are malformed tools, tool_choice and tool messages.
func TestToolRefusals(t *testing.T) {
	f := openFixture(t, Config{})
	for _, tt := range []struct {
		extra, param, says string
	}{
		{`"tools":[{"type":"function","function":{"name":"scan","parameters":{"type":"object","properties":{"a":{"type":"string"}},"patternProperties":{"^x":{}}}}}]`,
			"tools[0].function.parameters", `tool "scan": json schema: keyword "patternProperties" is not supported`},
		{`"tools":[` + toolsJSON("get_weather")[1:len(toolsJSON("get_weather"))-1] + `,{"type":"function","function":{"name":"bad","parameters":{"type":"object","properties":{"x":{"oneOf":[{"type":"string"}]}}}}}]`,
			"tools[1].function.parameters", `tool "bad": json schema: keyword "oneOf" is not supported (at #/properties/x)`},
		{`"tools":[{"type":"function","function":{"name":"n","parameters":{"type":"string"}}}]`, "tools[0].function.parameters", `tool "n": the parameters must describe an object`},
		{`"tools":[{"type":"function","function":{"name":"has space"}}]`, "tools[0].function.name", "letters, digits"},
		{`"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"}}]`, "tools[1].function.name", "unique"},
		{`"tools":[{"type":"code_interpreter"}]`, "tools[0].type", "functions only"},
		{`"tools":` + toolsJSON("get_weather") + `,"tool_choice":{"type":"function","function":{"name":"lot_status"}}`, "tool_choice.function.name", "not one of the tools"},
		{`"tools":` + toolsJSON("get_weather") + `,"tool_choice":"sometimes"`, "tool_choice", "not one of none, auto, required"},
		{`"tool_choice":{"type":"function","function":{"name":"x"}}`, "tool_choice", "needs tools"},
		{`"functions":[{"name":"f"}]`, "functions", "send them as tools"},
	} {
		resp, data := f.post(t, "/v1/chat/completions", `{"model":"tinychat","max_tokens":2,"messages":[{"role":"user","content":"x"}],`+tt.extra+`}`)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tt.extra, resp.StatusCode, data)
			continue
		}
		if e := apiErr(t, data); e.Param == nil || *e.Param != tt.param || !strings.Contains(e.Message, tt.says) {
			t.Errorf("%s: %s, want param %s saying %q", tt.extra, data, tt.param, tt.says)
		}
	}
	for _, tt := range []struct{ msgs, param string }{
		{`[{"role":"user","content":"x"},{"role":"tool","content":"18"}]`, "messages[1].tool_call_id"},
		{`[{"role":"user","content":"x","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}]`, "messages[0].tool_calls"},
		{`[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{x"}}]}]`, "messages[0].tool_calls[0].function.arguments"},
	} {
		_, data := f.post(t, "/v1/chat/completions", `{"model":"tinychat","max_tokens":2,"messages":`+tt.msgs+`}`)
		if e := apiErr(t, data); e.Param == nil || *e.Param != tt.param {
			t.Errorf("%s: %s, want param %s", tt.msgs, data, tt.param)
		}
	}
	_, data := f.post(t, "/v1/completions", `{"model":"tinylm","max_tokens":2,"prompt":"x","tools":`+toolsJSON("get_weather")+`}`)
	if e := apiErr(t, data); e.Param == nil || *e.Param != "tools" {
		t.Errorf("completions with tools: %s", data)
	}
}

// tool_choice none: the tools are offered, nothing is called; auto: the
// model answers in text or calls, and either is well formed; the
// conversation after a call (assistant tool_calls, tool result) is taken.
func TestToolChoiceNoneAuto(t *testing.T) {
	f := openFixture(t, Config{})
	for i := range 16 {
		stream := i%2 == 1
		body := fmt.Sprintf(`{"model":"tinychat","max_tokens":24,"temperature":1,"seed":%d,"stream":%v,"messages":[{"role":"user","content":"Weather %d"}],"tools":%s,"tool_choice":"none"}`,
			i, stream, i, toolsJSON(testToolNames...))
		resp, data := f.post(t, "/v1/chat/completions", body)
		a := readAnswer(t, stream, data)
		if resp.StatusCode != 200 || len(a.calls) != 0 || a.content == nil || a.finish == "tool_calls" {
			t.Fatalf("none %d: %d %s", i, resp.StatusCode, data)
		}
	}
	texts, calls := 0, 0
	for i := range 40 {
		stream := i%2 == 1
		body := fmt.Sprintf(`{"model":"tinychat","max_tokens":72,"temperature":1,"seed":%d,"stream":%v,"messages":[{"role":"user","content":"Weather %d"}],"tools":%s}`,
			i, stream, i, toolsJSON(testToolNames...))
		resp, data := f.post(t, "/v1/chat/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("auto %d: %d %s", i, resp.StatusCode, data)
		}
		a := readAnswer(t, stream, data)
		switch {
		case len(a.calls) > 0:
			calls++
			if a.finish != "tool_calls" || (!stream && a.content != nil) {
				t.Fatalf("auto %d: %s", i, data)
			}
			for _, c := range a.calls {
				if err := grammartest.Validate([]byte(testTools[c.Function.Name]), []byte(c.Function.Arguments)); err != nil {
					t.Fatalf("auto %d: %s(%s): %v", i, c.Function.Name, c.Function.Arguments, err)
				}
			}
		default:
			texts++
			if a.content == nil || (&tooling{}).isCall(*a.content) || a.finish == "tool_calls" {
				t.Fatalf("auto %d: text answer %s", i, data)
			}
		}
	}
	t.Logf("auto: %d text answers, %d calls", texts, calls)
	// the round trip: the call, its result, the model concludes in text
	body := `{"model":"tinychat","max_tokens":16,"tools":` + toolsJSON("get_weather") + `,"messages":[{"role":"user","content":"Weather in Oslo?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\",\"unit\":\"celsius\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"{\"temperature\":4}"}],"tool_choice":"none"}`
	resp, data := f.post(t, "/v1/chat/completions", body)
	if a := readAnswer(t, false, data); resp.StatusCode != 200 || a.content == nil || len(a.calls) != 0 {
		t.Fatalf("round trip: %d %s", resp.StatusCode, data)
	}
}

// The stream parser on outputs the tiny model rarely writes: parallel
// calls in each format (a JSON array; Qwen's tags one after another;
// Llama-3.1's single call with "parameters"), split at every byte, and
// text.
func TestCallStream(t *testing.T) {
	args := []string{`{"city":"a}\"[\n</tool_call>","unit":"celsius"}`, `{"lot":7}`}
	qwen := tokenizer.ToolFormat{Name: "qwen", Open: "<tool_call>\n", Close: "\n</tool_call>", Sep: "\n", ArgumentsKey: "arguments"}
	for _, tc := range []struct {
		format tokenizer.ToolFormat
		out    string
		calls  int
	}{
		{tokenizer.ToolFormat{}, `[{"name":"get_weather","arguments":` + args[0] + `},{"name":"lot_status","arguments":` + args[1] + `}]`, 2},
		{qwen, "<tool_call>\n" + `{"name":"get_weather","arguments":` + args[0] + "}\n</tool_call>\n<tool_call>\n" + `{"name":"lot_status","arguments":` + args[1] + "}\n</tool_call>", 2},
		{tokenizer.ToolFormat{Name: "llama3.1", ArgumentsKey: "parameters", Single: true}, `{"name":"get_weather","parameters":` + args[0] + `}`, 1},
	} {
		tl, err := readTools(&textRequest{Tools: json.RawMessage(toolsJSON("get_weather", "lot_status"))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tl.forModel(tc.format); err != nil {
			t.Fatal(err)
		}
		for _, step := range []int{1, 3, len(tc.out)} {
			c := tl.newCallStream()
			var got []toolCall
			for i := 0; i < len(tc.out); i += step {
				content, deltas := c.feed(tc.out[i:min(i+step, len(tc.out))])
				if content != "" {
					t.Fatalf("%s: content %q", tc.format.Name, content)
				}
				for _, d := range deltas {
					fn := d["function"].(map[string]any)
					if id, ok := d["id"].(string); ok {
						got = append(got, toolCall{ID: id})
						got[len(got)-1].Function.Name = fn["name"].(string)
						continue
					}
					got[d["index"].(int)].Function.Arguments += fn["arguments"].(string)
				}
			}
			want, ok := tl.parseCalls(tc.out)
			if !ok || len(got) != tc.calls || len(want) != tc.calls {
				t.Fatalf("%s, step %d: %d calls streamed, %d parsed (%t), want %d", tc.format.Name, step, len(got), len(want), ok, tc.calls)
			}
			for i := range want {
				if got[i].Function != want[i].Function || want[i].Function.Arguments != args[i] {
					t.Errorf("%s, step %d: call %d streamed %+v, parsed %+v", tc.format.Name, step, i, got[i].Function, want[i].Function)
				}
			}
		}
		c := tl.newCallStream()
		if content, deltas := c.feed(" {not a call"); content != " {not a call" || deltas != nil {
			t.Errorf("%s: text: %q %v", tc.format.Name, content, deltas)
		}
		if tl.isCall("Hello") || !tl.isCall(tc.out) {
			t.Errorf("%s: isCall wrong", tc.format.Name)
		}
	}
}

// TestToolFormatsConstrain: the constraint of each format accepts its
// calls and, under auto, text; Llama-3.1's takes one call only.
func TestToolFormatsConstrain(t *testing.T) {
	tools := json.RawMessage(`[{"type":"function","function":{"name":"lot_status","parameters":{"type":"object","properties":{"lot":{"type":"integer"}},"required":["lot"],"additionalProperties":false}}}]`)
	q := &textRequest{Tools: tools}
	tl, err := readTools(q)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []tokenizer.ToolFormat{{}, {Name: "qwen", Open: "<tool_call>\n", Close: "\n</tool_call>", Sep: "\n", ArgumentsKey: "arguments"}, {Name: "llama3.1", ArgumentsKey: "parameters", Single: true}} {
		c, err := tl.forModel(f)
		if err != nil {
			t.Fatal(err)
		}
		if c.String() == "" {
			t.Errorf("%s: empty constraint", f.Name)
		}
		if s := string(tl.schema()); !strings.Contains(s, strconv.Quote(tl.format.ArgumentsKey)) {
			t.Errorf("%s: schema %s lacks the arguments key %q", f.Name, s, tl.format.ArgumentsKey)
		}
		if f.Single && strings.Contains(string(tl.schema()), `"array"`) {
			t.Errorf("%s: a single-call format allows a list: %s", f.Name, tl.schema())
		}
	}
}

// toolsScript runs a tool-call round trip with the official OpenAI client:
// parse() with zodFunction tools (the client parses and checks each call's
// arguments with zod; ajv checks them against the JSON Schema sent), the
// tool's result sent back, the model concluding in text; the same call
// streamed and assembled by the client's stream helper; and
// parallel_tool_calls false giving one call.
const toolsScript = `
import OpenAI from 'openai';
import { z } from 'zod';
import { zodFunction } from 'openai/helpers/zod';
import Ajv from 'ajv';
const c = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'k', maxRetries: 0 });
const ajv = new Ajv({ strict: false });
const fail = (what) => { console.log('FAIL ' + what); process.exit(1); };
const Weather = z.object({ city: z.string().max(24), unit: z.enum(['celsius', 'fahrenheit']) });
const Lot = z.object({ lot: z.number().int().min(1).max(9999), verbose: z.boolean() });
const tools = [zodFunction({ name: 'get_weather', parameters: Weather, description: 'Weather in a city' }),
  zodFunction({ name: 'lot_status', parameters: Lot, description: 'A lot\'s status' })];
const validators = Object.fromEntries(tools.map(t => [t.function.name, ajv.compile(t.function.parameters)]));
let calls = 0, valid = 0, trips = 0, streamed = 0;
const check = (call) => {
  calls++;
  const args = JSON.parse(call.function.arguments);
  const zs = call.function.name === 'get_weather' ? Weather : Lot;
  if (!validators[call.function.name](args)) fail('ajv ' + JSON.stringify(call) + ' ' + JSON.stringify(validators[call.function.name].errors));
  if (!zs.safeParse(args).success) fail('zod ' + JSON.stringify(call));
  if (call.function.parsed_arguments !== undefined && JSON.stringify(call.function.parsed_arguments) !== JSON.stringify(zs.parse(args))) fail('parsed_arguments ' + JSON.stringify(call));
  if (!/^call_/.test(call.id) || call.type !== 'function') fail('call ' + JSON.stringify(call));
  valid++;
};
for (let i = 0; i < 6; i++) {
  const messages = [{ role: 'user', content: 'Weather or lot ' + i + '?' }];
  const tool_choice = i % 2 ? 'required' : { type: 'function', function: { name: i % 4 ? 'lot_status' : 'get_weather' } };
  const r = await c.chat.completions.parse({ model: 'tinychat', max_tokens: 60, temperature: 1, seed: i, messages, tools, tool_choice });
  const m = r.choices[0].message;
  if (r.choices[0].finish_reason !== 'tool_calls' || m.content !== null || !m.tool_calls?.length) fail('call ' + JSON.stringify(r));
  for (const tc of m.tool_calls) { if (!tc.function.parsed_arguments) fail('not parsed ' + JSON.stringify(tc)); check(tc); }
  messages.push(m);
  for (const tc of m.tool_calls) messages.push({ role: 'tool', tool_call_id: tc.id, content: JSON.stringify({ ok: true, n: i }) });
  const end = await c.chat.completions.create({ model: 'tinychat', max_tokens: 40, temperature: 0, seed: i, messages, tools, tool_choice: 'none', stop: ['.', '\n', ' '] });
  const e = end.choices[0];
  if (e.finish_reason !== 'stop' || typeof e.message.content !== 'string' || e.message.tool_calls?.length) fail('conclusion ' + JSON.stringify(end));
  trips++;
}
for (let i = 0; i < 6; i++) {
  const s = c.chat.completions.stream({ model: 'tinychat', max_tokens: 60, temperature: 1, seed: 50 + i, tools, tool_choice: 'required',
    parallel_tool_calls: false, messages: [{ role: 'user', content: 'Stream ' + i }] });
  const done = [];
  s.on('tool_calls.function.arguments.done', (ev) => done.push(ev.name));
  const r = await s.finalChatCompletion();
  const m = r.choices[0].message;
  if (r.choices[0].finish_reason !== 'tool_calls' || m.tool_calls?.length !== 1 || done.length !== 1) fail('stream ' + JSON.stringify(r) + ' ' + done);
  check(m.tool_calls[0]);
  streamed++;
}
console.log('ok ' + calls + ' calls, ' + valid + ' valid, ' + trips + ' round trips, ' + streamed + ' streamed');
`

// TestToolCallsOpenAIClient runs toolsScript with node.
func TestToolCallsOpenAIClient(t *testing.T) {
	f := openFixture(t, Config{})
	out, err := nodeScript(t, f, toolsScript, []string{"openai@7.55.0", "zod@4.6.7", "ajv@8.20.0", "fast-deep-equal@3.1.3",
		"json-schema-traverse@1.0.0", "require-from-string@2.0.2", "fast-uri@3.0.6"})
	last := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	if err != nil || !strings.HasPrefix(last, "ok ") || !strings.HasSuffix(last, "6 round trips, 6 streamed") {
		t.Fatalf("node: %v\n%s", err, out)
	}
	t.Log(last)
}
