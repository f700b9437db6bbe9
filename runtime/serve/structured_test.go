package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/internal/grammar/grammartest"
)

const readingSchema = `{"type":"object","properties":{"lot":{"type":"string"},"count":{"type":"integer"},"ok":{"type":"boolean"}},"required":["lot","count","ok"],"additionalProperties":false}`

// sseEvents is a stream's data events, decoded ([DONE] left out).
func sseEvents(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatalf("event %s: %v", d, err)
		}
		out = append(out, ev)
	}
	return out
}

// choice0 is an answer's (or an event's) first choice.
func choice0(v map[string]any) map[string]any {
	cs, _ := v["choices"].([]any)
	if len(cs) == 0 {
		return nil
	}
	c, _ := cs[0].(map[string]any)
	return c
}

// response_format json_schema and json_object constrain the answer, whole
// and streamed: every answer parses and validates against its schema.
func TestResponseFormat(t *testing.T) {
	f := openFixture(t, Config{})
	for i := range 8 {
		stream := i%2 == 1
		model := []string{"tinylm", "tinychat"}[i%4/2]
		body := fmt.Sprintf(`{"model":%q,"max_tokens":64,"temperature":1,"seed":%d,"stream":%v,"messages":[{"role":"user","content":"Label %d"}],`+
			`"response_format":{"type":"json_schema","json_schema":{"name":"reading","strict":true,"schema":%s}}}`, model, i, stream, i, readingSchema)
		resp, data := f.post(t, "/v1/chat/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d: %s", resp.StatusCode, data)
		}
		var content string
		if stream {
			for _, ev := range sseEvents(t, data) {
				if d, ok := choice0(ev)["delta"].(map[string]any); ok {
					s, _ := d["content"].(string)
					content += s
				}
			}
		} else {
			var r map[string]any
			json.Unmarshal(data, &r)
			msg := choice0(r)["message"].(map[string]any)
			content = msg["content"].(string)
			if _, ok := msg["refusal"]; !ok {
				t.Errorf("no refusal field in %s", data)
			}
		}
		if err := grammartest.Validate([]byte(readingSchema), []byte(content)); err != nil {
			t.Fatalf("answer %d (stream %v): %v: %s", i, stream, err, content)
		}
	}
	resp, data := f.post(t, "/v1/completions", `{"model":"tinylm","max_tokens":48,"prompt":"The whale","response_format":{"type":"json_object"}}`)
	var r map[string]any
	json.Unmarshal(data, &r)
	var obj map[string]any
	if resp.StatusCode != 200 || json.Unmarshal([]byte(choice0(r)["text"].(string)), &obj) != nil && choice0(r)["finish_reason"] != "length" {
		t.Fatalf("json_object: %d %s", resp.StatusCode, data)
	}
	if resp, data := f.post(t, "/v1/chat/completions", `{"model":"tinylm","max_tokens":8,"messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}}`); resp.StatusCode != 200 {
		t.Fatalf("text: %d %s", resp.StatusCode, data)
	}
}

// A field that would change what is generated and that the server does
// not implement is a 400 naming it; sent with its no-op value, or a
// harmless unknown field, it is accepted.
func TestUnsupportedFields(t *testing.T) {
	f := openFixture(t, Config{})
	for _, tt := range []struct {
		extra string
		param string // "" : accepted
	}{
		{`"response_format":{"type":"some_future_format"}`, "response_format.type"},
		{`"response_format":{"type":"json_schema"}`, "response_format.json_schema"},
		{`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","patternProperties":{"a":{}}}}}`, "response_format.json_schema.schema"},
		{`"response_format":"json"`, "response_format"},
		{`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","not":{}}}}]`, "tools[0].function.parameters"},
		{`"tool_choice":"required"`, "tool_choice"},
		{`"tools":[{"type":"function","function":{"name":"f"}}],"response_format":{"type":"json_object"}`, "response_format"},
		{`"functions":[{"name":"f"}]`, "functions"},
		{`"logit_bias":{"50256":-100}`, "logit_bias"},
		{`"n":2`, "n"},
		{`"top_logprobs":3`, "top_logprobs"},
		{`"logprobs":true,"top_logprobs":21`, "top_logprobs"},
		{`"audio":{"voice":"x"}`, "audio"},
		{`"modalities":["text","audio"]`, "modalities"},
		{`"guided_json":{"type":"object"}`, "guided_json"},
		{`"presence_penalty":3`, "presence_penalty"},
		{`"user":"kiosk-3","metadata":{"a":"b"},"store":false,"service_tier":"auto"`, ""},
		{`"tools":[],"tool_choice":"none","logit_bias":{},"parallel_tool_calls":true,"modalities":["text"]`, ""},
		{`"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,"min_p":0.05`, ""},
		{`"logprobs":false`, ""},
	} {
		resp, data := f.post(t, "/v1/chat/completions", `{"model":"tinylm","max_tokens":2,"messages":[{"role":"user","content":"x"}],`+tt.extra+`}`)
		switch {
		case tt.param == "" && resp.StatusCode != 200:
			t.Errorf("%s: %d %s", tt.extra, resp.StatusCode, data)
		case tt.param != "" && resp.StatusCode != http.StatusBadRequest:
			t.Errorf("%s: %d %s, want 400", tt.extra, resp.StatusCode, data)
		case tt.param != "":
			if e := apiErr(t, data); e.Param == nil || *e.Param != tt.param || !strings.HasPrefix(e.Message, tt.param+": ") {
				t.Errorf("%s: %s, want param %s", tt.extra, data, tt.param)
			}
		}
	}
	_, data := f.post(t, "/v1/chat/completions", `{"model":"tinylm","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","patternProperties":{"a":{}}}}}}`)
	if e := apiErr(t, data); !strings.Contains(e.Message, `keyword "patternProperties" is not supported`) || e.Code == nil || *e.Code != "unsupported_schema" {
		t.Errorf("schema refusal: %s", data)
	}
}

// logprobs and top_logprobs come back in OpenAI's shapes: chat's
// choices[].logprobs.content[] (token, logprob, bytes, top_logprobs),
// whole and one entry per streamed token; completions' legacy lists.
func TestLogprobsAnswer(t *testing.T) {
	f := openFixture(t, Config{})
	check := func(entry map[string]any, top int) {
		t.Helper()
		tok, _ := entry["token"].(string)
		lp, ok := entry["logprob"].(float64)
		bs, _ := entry["bytes"].([]any)
		tops, _ := entry["top_logprobs"].([]any)
		if !ok || lp > 0 || len(bs) == 0 || len(bs) != len(tok) && !strings.ContainsRune(tok, '\uFFFD') || len(tops) != top {
			t.Fatalf("logprob entry %v", entry)
		}
	}
	resp, data := f.post(t, "/v1/chat/completions", `{"model":"tinylm","max_tokens":6,"temperature":0,"logprobs":true,"top_logprobs":3,"messages":[{"role":"user","content":"Call me"}]}`)
	var r map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(data, &r) != nil {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	content := choice0(r)["logprobs"].(map[string]any)["content"].([]any)
	if len(content) != 6 {
		t.Fatalf("%d entries for 6 tokens: %s", len(content), data)
	}
	for _, e := range content {
		check(e.(map[string]any), 3)
	}
	resp, data = f.post(t, "/v1/chat/completions", `{"model":"tinylm","max_tokens":6,"stream":true,"logprobs":true,"messages":[{"role":"user","content":"Call me"}]}`)
	n := 0
	for _, ev := range sseEvents(t, data) {
		if lp, ok := choice0(ev)["logprobs"].(map[string]any); ok {
			for _, e := range lp["content"].([]any) {
				check(e.(map[string]any), 0)
				n++
			}
		}
	}
	if resp.StatusCode != 200 || n != 6 {
		t.Fatalf("stream: %d entries for 6 tokens: %s", n, data)
	}
	_, data = f.post(t, "/v1/completions", `{"model":"tinylm","max_tokens":4,"logprobs":2,"prompt":"Call me"}`)
	json.Unmarshal(data, &r)
	lp := choice0(r)["logprobs"].(map[string]any)
	if toks, _ := lp["tokens"].([]any); len(toks) != 4 || len(lp["token_logprobs"].([]any)) != 4 || len(lp["top_logprobs"].([]any)[0].(map[string]any)) == 0 {
		t.Fatalf("completion logprobs: %s", data)
	}
}

// structuredScript checks structured output with code we did not write:
// the official OpenAI client's parse() with a zod schema, and ajv (with
// ajv-formats) validating every answer against its schema, as
// /work-independent checks do; then the refusals the client must see as
// BadRequestError.
const structuredScript = `
import OpenAI from 'openai';
import { z } from 'zod';
import { zodResponseFormat } from 'openai/helpers/zod';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
const c = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'k', maxRetries: 0 });
const ajv = new Ajv({ strict: false });
addFormats(ajv);
const fail = (what) => { console.log('FAIL ' + what); process.exit(1); };
let good = 0, total = 0;
const Reading = z.object({ lot: z.string(), count: z.number().int(), ok: z.boolean(), when: z.string().datetime(), tag: z.enum(['a', 'b']), note: z.string().nullable() });
const rf = zodResponseFormat(Reading, 'reading');
const vr = ajv.compile(rf.json_schema.schema);
for (let i = 0; i < 10; i++) {
  const r = await c.chat.completions.parse({ model: 'tinylm', max_tokens: 120, temperature: 1, seed: i,
    messages: [{ role: 'user', content: 'Reading ' + i }], response_format: rf });
  total++;
  const p = r.choices[0].message.parsed;
  if (p && typeof p.count === 'number' && vr(JSON.parse(r.choices[0].message.content))) good++;
  else console.log('invalid: ' + r.choices[0].message.content + ' ' + JSON.stringify(vr.errors));
}
for (const [i, s] of JSON.parse(process.env.SCHEMAS).entries()) {
  const v = ajv.compile(s);
  for (let k = 0; k < 4; k++) {
    const stream = k % 2 === 1;
    const req = { model: 'tinylm', max_tokens: 160, temperature: 1, seed: 100 * i + k, stream,
      messages: [{ role: 'user', content: 'Item ' + k }], response_format: { type: 'json_schema', json_schema: { name: 's' + i, strict: true, schema: s } } };
    let text = '';
    if (stream) { for await (const ch of await c.chat.completions.create(req)) text += ch.choices[0]?.delta?.content ?? ''; }
    else text = (await c.chat.completions.create(req)).choices[0].message.content;
    total++;
    try { if (v(JSON.parse(text))) { good++; continue; } } catch (e) {}
    console.log('invalid: ' + text + ' ' + JSON.stringify(v.errors));
  }
}
const refused = async (extra, param) => {
  try { await c.chat.completions.create({ model: 'tinylm', max_tokens: 2, messages: [{ role: 'user', content: 'x' }], ...extra }); }
  catch (e) { if (e instanceof OpenAI.BadRequestError && e.param === param) return; fail(param + ': ' + e); }
  fail(param + ' accepted');
};
await refused({ response_format: { type: 'some_future_format' } }, 'response_format.type');
await refused({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'string' } }, patternProperties: {} } } }] }, 'tools[0].function.parameters');
await refused({ logit_bias: { '1': 5 } }, 'logit_bias');
const lp = await c.chat.completions.create({ model: 'tinylm', max_tokens: 4, logprobs: true, top_logprobs: 2, messages: [{ role: 'user', content: 'x' }] });
const e = lp.choices[0].logprobs.content;
if (e.length !== 4 || e.some(x => typeof x.token !== 'string' || x.logprob > 0 || x.top_logprobs.length !== 2 || !Array.isArray(x.bytes))) fail('logprobs ' + JSON.stringify(e));
console.log('ok ' + good + '/' + total);
`

// TestStructuredOutputsAjv runs structuredScript with node.
func TestStructuredOutputsAjv(t *testing.T) {
	f := openFixture(t, Config{})
	schemas := "[" + strings.Join([]string{readingSchema,
		`{"type":"object","properties":{"name":{"type":"string","maxLength":16},"tags":{"type":"array","items":{"type":"string","enum":["red","green","blue"]},"minItems":1,"maxItems":3},"score":{"type":["number","null"],"minimum":0,"maximum":100}},"required":["name","tags","score"],"additionalProperties":false}`,
		`{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":99},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v","kids"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
		`{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"},"mail":{"type":"string","format":"email"},"day":{"type":"string","format":"date"},"code":{"type":"string","pattern":"^[A-Z]{3}-\\d{2,4}$"}},"required":["when","id","mail","day","code"],"additionalProperties":false}`,
	}, ",") + "]"
	out, err := nodeScript(t, f, structuredScript, []string{"openai@7.55.0", "zod@4.6.7", "ajv@8.20.0", "ajv-formats@3.0.1", "fast-deep-equal@3.1.3",
		"json-schema-traverse@1.0.0", "require-from-string@2.0.2", "fast-uri@3.0.6"}, "SCHEMAS="+schemas)
	last := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	if err != nil || last != "ok 26/26" {
		t.Fatalf("node: %v\n%s", err, out)
	}
	t.Log(last)
}
