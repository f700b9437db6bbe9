package grammar

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/internal/grammar/grammartest"
)

// Schemas the tests generate from: OpenAI strict-mode shapes (required
// properties, additionalProperties false), arrays with bounds, enums,
// nullable types, optional properties, recursion through $defs, formats,
// patterns, anyOf of objects, and zod's output (a format with its pattern).
var testSchemas = map[string]string{
	"reading": `{"type":"object","properties":{"lot":{"type":"string"},"count":{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991},"ok":{"type":"boolean"}},"required":["lot","count","ok"],"additionalProperties":false}`,
	"tags": `{"type":"object","properties":{"name":{"type":"string","maxLength":12},"tags":{"type":"array","items":{"enum":["a","b","c d"]},"minItems":1,"maxItems":3},` +
		`"score":{"type":["number","null"],"minimum":0,"maximum":100},"note":{"type":"string"},"n":{"type":"integer","exclusiveMinimum":-5,"exclusiveMaximum":5}},"required":["name","tags","score"],"additionalProperties":false}`,
	"tree": `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},` +
		`"required":["v","kids"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
	"formats": `{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"},"mail":{"type":"string","format":"email"},` +
		`"code":{"type":"string","pattern":"^[A-Z]{3}-\\d{2,4}$"},"day":{"type":"string","format":"date"},"at":{"type":"string","format":"time"}},"required":["when","id","mail","code","day","at"],"additionalProperties":false}`,
	"shapes": `{"anyOf":[{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number","exclusiveMinimum":0,"maximum":10}},"required":["kind","r"],"additionalProperties":false},` +
		`{"type":"object","properties":{"kind":{"const":"rect"},"w":{"type":"integer","minimum":1},"h":{"type":"integer","minimum":1}},"required":["kind","w","h"],"additionalProperties":false},{"type":"null"}]}`,
	"zod": `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"minItems":1,"maxItems":3,"type":"array","items":{"type":"string"}},` +
		`"d":{"type":"string","format":"date-time","pattern":"^(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))T(?:(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d+)?(?:Z))$"},` +
		`"e":{"type":"string","enum":["x","y"]},"o":{"type":["string","null"]},"u":{"type":["number","null"]},` +
		`"em":{"type":"string","format":"email","pattern":"^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},` +
		`"re":{"type":"string","pattern":"^[A-Z]{3}-\\d+$"}},"required":["a","d","e","o","u","em","re"],"additionalProperties":false}`,
	"optional": `{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"type":"integer","minimum":10,"maximum":12}},"additionalProperties":false}`,
	"any":      `{"type":"object","properties":{"meta":{},"list":{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}},"required":["meta","list"]}`,
}

func mustSchema(t testing.TB, src string) *Grammar {
	t.Helper()
	g, err := JSONSchema([]byte(src))
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return g
}

func TestSchemaMatches(t *testing.T) {
	for _, tt := range []struct {
		name         string
		accept, deny []string
	}{
		{"reading", []string{`{"lot":"a","count":12,"ok":true}`, `{"lot":"a\"b\\c\n","count":-5,"ok":false}`, `{"lot":"é日本","count":999999999999999,"ok":true}`},
			[]string{`{"lot":"a","count":12}`, `{"lot":"a", "count":12,"ok":true}`, `{"lot":"a","count":012,"ok":true}`, `{"lot":"a","count":1.5,"ok":true}`,
				`{"count":1,"lot":"a","ok":true}`, `{"lot":"a","count":1,"ok":true,"x":1}`, "{\"lot\":\"a\x01\",\"count\":1,\"ok\":true}", `{"lot":"a","count":-0,"ok":true}`}},
		{"tags", []string{`{"name":"","tags":["a"],"score":null}`, `{"name":"abcdefghijkl","tags":["a","c d","b"],"score":100,"note":"x","n":4}`, `{"name":"x","tags":["b"],"score":99.5,"n":-4}`},
			[]string{`{"name":"abcdefghijklm","tags":["a"],"score":null}`, `{"name":"x","tags":[],"score":null}`, `{"name":"x","tags":["a","a","a","a"],"score":null}`,
				`{"name":"x","tags":["d"],"score":null}`, `{"name":"x","tags":["a"],"score":100.5}`, `{"name":"x","tags":["a"],"score":-1}`, `{"name":"x","tags":["a"],"score":1,"n":5}`}},
		{"tree", []string{`{"v":1,"kids":[]}`, `{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]},{"v":0,"kids":[]}]}`},
			[]string{`{"v":10,"kids":[]}`, `{"v":1,"kids":[{"v":2}]}`, `{"v":1,"kids":[{"v":1,"kids":[]},{"v":1,"kids":[]},{"v":1,"kids":[]}]}`}},
		{"formats", []string{`{"when":"2024-02-28T23:59:59.5+05:30","id":"123e4567-e89b-42d3-a456-426614174000","mail":"a.b+c@ex-ample.co","code":"ABC-123","day":"1999-12-31","at":"00:00:00Z"}`},
			[]string{`{"when":"2024-02-30T23:59:59Z","id":"123e4567-e89b-42d3-a456-426614174000","mail":"a@b.co","code":"ABC-123","day":"1999-12-31","at":"00:00:00Z"}`,
				`{"when":"2024-02-28T23:59:59Z","id":"123e4567-e89b-42d3-a456-426614174000","mail":"a@b.co","code":"AB-123","day":"1999-12-31","at":"00:00:00Z"}`,
				`{"when":"2024-02-28T23:59:59Z","id":"123e4567-e89b-42d3-a456-426614174000","mail":"a@b","code":"ABC-123","day":"1999-12-31","at":"00:00:00Z"}`}},
		{"shapes", []string{`{"kind":"circle","r":0.5}`, `{"kind":"rect","w":1,"h":20}`, `null`}, []string{`{"kind":"circle","r":0}`, `{"kind":"rect","w":0,"h":1}`, `{"kind":"circle","w":1,"h":1}`}},
		{"optional", []string{`{}`, `{"a":true}`, `{"b":null}`, `{"a":false,"c":11}`, `{"a":true,"b":null,"c":12}`}, []string{`{,"b":null}`, `{"b":null,"a":true}`, `{"c":13}`, `{"a":true,}`}},
		{"any", []string{`{"meta":{"x":[1,{"y":null}],"z":"w"},"list":["a",1]}`, `{"meta":7,"list":["",-2]}`}, []string{`{"meta":1,"list":["a"]}`, `{"meta":1,"list":["a",1,2]}`}},
	} {
		g := mustSchema(t, testSchemas[tt.name])
		for _, s := range tt.accept {
			if !g.Match(s) {
				t.Errorf("%s: rejects %s", tt.name, s)
			}
			if err := grammartest.Validate([]byte(testSchemas[tt.name]), []byte(s)); err != nil {
				t.Errorf("%s: the test's own example %s is invalid: %v", tt.name, s, err)
			}
		}
		for _, s := range tt.deny {
			if g.Match(s) {
				t.Errorf("%s: accepts %s", tt.name, s)
			}
		}
	}
}

// A schema the compiler cannot honour is refused, naming the construct.
func TestSchemaRefusals(t *testing.T) {
	for _, tt := range []struct{ schema, want string }{
		{`{"type":"object","patternProperties":{"^a":{}}}`, `json schema: keyword "patternProperties" is not supported`},
		{`{"type":"object","properties":{"a":{"not":{"type":"null"}}}}`, `json schema: keyword "not" is not supported (at #/properties/a)`},
		{`{"oneOf":[{"type":"string"},{"type":"integer"}]}`, `keyword "oneOf" is not supported`},
		{`{"type":"array","uniqueItems":true}`, `keyword "uniqueItems" is not supported`},
		{`{"type":"integer","multipleOf":5}`, `keyword "multipleOf" is not supported`},
		{`{"type":"string","format":"credit-card"}`, `format "credit-card" is not supported`},
		{`{"type":"string","pattern":"(?=a)b"}`, `pattern "(?=a)b"`},
		{`{"type":"string","pattern":"a\\bb"}`, `word boundaries`},
		{`{"type":"string","pattern":"a^b"}`, `anchor`},
		{`{"$ref":"https://example.com/s.json"}`, `only references within the schema`},
		{`{"$ref":"#/$defs/missing"}`, `points at nothing`},
		{`{"type":"thing"}`, `type "thing" is not a JSON Schema type`},
		{`false`, `the schema false matches nothing`},
		{`{"type":"object","required":["a"],"additionalProperties":false}`, `required property "a" is not in properties`},
		{`{"allOf":[{"type":"string"},{"maxLength":3}]}`, `"allOf" is supported with one schema only`},
		{`{"type":"string","minLength":5,"maxLength":3}`, `maxLength 3 is below minLength 5`},
		{`{"type":"string","pattern":"^[a-c]+$","format":"uuid"}`, `no string satisfies pattern, format and length together`},
		{`{"type":"integer","minimum":5,"maximum":4}`, `no number`},
		{`{"enum":[1,2],"type":"string"}`, `no value of the enum has the schema's type`},
		{`{"type":"string","enum":["a"],"pattern":"b"}`, `keyword "pattern" beside enum or const is not supported`},
		{`{"anyOf":[{"type":"string"}],"type":"string"}`, `keyword "type" beside "anyOf" is not supported`},
		{`{"type":`, `not valid JSON`},
		{`[1]`, `a schema must be an object or a boolean`},
		{`{"type":"array","items":{"type":"string","pattern":"a{2000}"}}`, `pattern`},
	} {
		_, err := JSONSchema([]byte(tt.schema))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "json schema: ") {
			t.Errorf("%s: %v, want an error with %q", tt.schema, err, tt.want)
		}
	}
}

func TestRegex(t *testing.T) {
	g, err := Regex(`[a-c]{2}\d+(x|yz)?`)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ab1", "cc12yz", "aa0x"} {
		if !g.Match(s) {
			t.Errorf("rejects %q", s)
		}
	}
	for _, s := range []string{"a1", "ab", "ab1y", "xab1"} {
		if g.Match(s) {
			t.Errorf("accepts %q", s)
		}
	}
	// Unicode classes are matched as UTF-8.
	g, _ = Regex(`[α-ω]+\p{Han}`)
	if !g.Match("αβ日") || g.Match("ab日") || g.Match("αβ") {
		t.Error("unicode classes")
	}
	if _, err := Regex(`(a)\1`); err == nil || !strings.HasPrefix(err.Error(), "regex: ") {
		t.Errorf("backreference: %v", err)
	}
}

// Every rune range's UTF-8 sequences cover exactly its code points.
func TestUTF8Ranges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		lo := rune(rng.IntN(0x110000))
		hi := lo + rune(rng.IntN(0x2000))
		g := &builder{}
		g.rule("r")
		g.bodies[0] = utf8Expr([]runeRange{{lo, hi}})
		gr, err := g.finish("t")
		if err != nil {
			continue // all surrogates
		}
		for range 20 {
			r := rune(rng.IntN(0x110000))
			if r >= 0xD800 && r <= 0xDFFF {
				continue
			}
			in := lo <= r && r <= hi
			if got := gr.Match(string(r)); got != in {
				t.Fatalf("[%x, %x] on %x: %v", lo, hi, r, got)
			}
		}
	}
}

// testVocab is a synthetic vocabulary: every byte, then pieces of JSON
// and text (keys with their quotes and colons, digits, words, multibyte
// characters, a character split over two tokens), so tokens span grammar
// symbols as a real BPE's do. Token 0 is the end token; the rows are a
// few ids wider than the vocabulary, as padded embeddings are.
func testVocab() (*Vocab, [][]byte) {
	toks := [][]byte{nil}
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	for _, p := range []string{`{"`, `":`, `","`, `":"`, `"}`, `},{"`, `}]`, `":[`, `":{"`, `true`, `false`, `null`, `,"`, `":-`, `"]`, `["`, `12`, `345`, `0.`, `.5`,
		`lot`, `count`, `ok`, `name`, `hello`, ` world`, `é`, `日本`, "\xe6\x97", "\xa5", `\n`, `\"`, `2024-`, `-01-`, `T12:`, `:00Z`, `@example.com`, `abc`, `ABC`,
		`-`, `--`, `}}`, `]}`, `,{`, `"}}`, `"kind":"`, `circle`, `rect`, `"kids":[`, `{"v":`, `"tags":["`, `c d`, `null}`, `Z"`, `-4`, `e89b`, `"},`} {
		toks = append(toks, []byte(p))
	}
	return NewVocab(toks, len(toks)+3, []int32{0}), toks
}

// sample draws one generation under tg, uniformly among the allowed
// tokens (the end token as likely as any other), checking on the way that
// every allowed token is accepted; it returns the text and whether it
// ended with the end token.
func sample(t testing.TB, tg *TokenGrammar, rng *rand.Rand, maxTokens int, toks [][]byte) (string, bool) {
	t.Helper()
	m := tg.NewMatcher()
	mask := make([]uint64, (tg.v.size+63)/64)
	var out []byte
	for i := range maxTokens {
		n := m.Mask(mask, maxTokens-i)
		if n == 0 {
			t.Fatalf("no token allowed after %q", out)
		}
		k := rng.IntN(n)
		id := int32(-1)
		for j := range tg.v.size {
			if mask[j>>6]&(1<<(j&63)) != 0 {
				if k == 0 {
					id = int32(j)
					break
				}
				k--
			}
		}
		if !m.Accept(id) {
			t.Fatalf("allowed token %d (%q) refused after %q", id, toks[id], out)
		}
		if m.Ended() {
			return string(out), true
		}
		out = append(out, toks[id]...)
	}
	return string(out), false
}

// Sampling under the masks gives outputs that parse and validate, every
// one, within the token budget.
func TestGenerateValid(t *testing.T) {
	v, toks := testVocab()
	rng := rand.New(rand.NewPCG(1, 2))
	total := 0
	for name, src := range testSchemas {
		tg := NewTokenGrammar(mustSchema(t, src), v)
		for i := range 40 {
			maxTokens := 200 + 50*(i%3)
			s, _ := sample(t, tg, rng, maxTokens, toks)
			if !tg.g.Match(s) {
				t.Fatalf("%s: the grammar does not match its own output %s", name, s)
			}
			var x any
			if err := json.Unmarshal([]byte(s), &x); err != nil {
				t.Fatalf("%s: %v: %s", name, err, s)
			}
			if err := grammartest.Validate([]byte(src), []byte(s)); err != nil {
				t.Fatalf("%s: %v: %s", name, err, s)
			}
			total++
		}
	}
	tg := NewTokenGrammar(JSON(), v)
	for range 40 {
		s, _ := sample(t, tg, rng, 120, toks)
		var x map[string]any
		if err := json.Unmarshal([]byte(s), &x); err != nil {
			t.Fatalf("json: %v: %s", err, s)
		}
		total++
	}
	t.Logf("%d outputs, all valid", total)
}

// A mask allows exactly the tokens that Accept takes (end tokens only
// where the output is complete).
func TestMaskIsExact(t *testing.T) {
	v, toks := testVocab()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, name := range []string{"tags", "tree", "shapes", "any"} {
		tg := NewTokenGrammar(mustSchema(t, testSchemas[name]), v)
		m := tg.NewMatcher()
		mask := make([]uint64, (v.size+63)/64)
		for step := 0; step < 60 && !m.Ended(); step++ {
			m.Mask(mask, 0)
			var allowed []int32
			for id := range int32(v.size) {
				in := mask[id>>6]&(1<<(id&63)) != 0
				if in {
					allowed = append(allowed, id)
				}
				if got := m.Clone().Accept(id); got != in {
					t.Fatalf("%s step %d: token %d (%q): mask %v, Accept %v", name, step, id, toks[min(int(id), len(toks)-1)], in, got)
				}
			}
			m.Accept(allowed[rng.IntN(len(allowed))])
		}
	}
}

// As max_tokens nears, only tokens that leave room to finish (and to end)
// are allowed: with a budget just above the shortest output, every output
// completes and ends with the end token.
func TestBudgetCompletes(t *testing.T) {
	v, toks := testVocab()
	rng := rand.New(rand.NewPCG(7, 8))
	for _, name := range []string{"reading", "tree", "formats", "zod"} {
		g := mustSchema(t, testSchemas[name])
		tg := NewTokenGrammar(g, v)
		budget := g.NewMatcher().Remaining() + 2
		for range 20 {
			s, ended := sample(t, tg, rng, budget, toks)
			if !g.Match(s) || !ended {
				t.Fatalf("%s: %d tokens left %s incomplete", name, budget, s)
			}
		}
	}
	// a budget below the shortest output still gives tokens (cut at the cap)
	tg := NewTokenGrammar(mustSchema(t, testSchemas["formats"]), v)
	if s, ended := sample(t, tg, rng, 5, toks); ended || len(s) == 0 {
		t.Fatalf("a too small budget: %q %v", s, ended)
	}
}

func TestTrie(t *testing.T) {
	toks := [][]byte{[]byte("ab"), []byte("a"), nil, []byte("abc"), []byte("b"), []byte("ab")}
	v := NewVocab(toks, 8, []int32{2})
	var got []string
	for n := range int32(v.Nodes()) {
		for _, id := range v.ord[v.tok[n] : v.tok[n]+v.own[n]] {
			got = append(got, fmt.Sprintf("%s=%d@%d", v.path(nil, n), id, n))
		}
	}
	if want := "a=1@1 ab=0@2 ab=5@2 abc=3@3 b=4@4"; strings.Join(got, " ") != want {
		t.Fatalf("trie %v, want %s", got, want)
	}
	if v.end[1] != 4 || v.end[2] != 4 || v.end[0] != 5 {
		t.Fatalf("subtree ends %v", v.end)
	}
}

// JSONSchemaOrText takes the schema's JSON from the first byte, or text
// that does not begin (after white space) with '{' or '['.
func TestJSONSchemaOrText(t *testing.T) {
	g, err := JSONSchemaOrText([]byte(testSchemas["reading"]))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{``, `Hello.`, `  Hello {x}`, "\n\nok", `"quoted"`, `a{"lot":"a"}`, `{"lot":"a","count":1,"ok":true}`, "é\xff\x00 anything", `]`, `}`} {
		if !g.Match(s) {
			t.Errorf("%q refused", s)
		}
	}
	for _, s := range []string{`{`, `{"lot":"a"}`, ` {"lot":"a","count":1,"ok":true}`, `[1]`, "\n[", `{"lot":"a","count":1,"ok":true}x`} {
		if g.Match(s) {
			t.Errorf("%q accepted", s)
		}
	}
	if g.String() != "json schema or text" {
		t.Errorf("String() = %q", g.String())
	}
	if _, err := JSONSchemaOrText([]byte(`{"type":"object","not":{}}`)); err == nil || !strings.Contains(err.Error(), `"not"`) {
		t.Errorf("bad schema: %v", err)
	}
}

// TestJSONSchemaFramed: Qwen's tool-call frame, one or more calls, or text
// that does not begin with the frame's '<'.
func TestJSONSchemaFramed(t *testing.T) {
	f := Frame{Open: "<tool_call>\n", Close: "\n</tool_call>", Sep: "\n", Many: true, OrText: true}
	g, err := JSONSchemaFramed([]byte(testSchemas["reading"]), f)
	if err != nil {
		t.Fatal(err)
	}
	call := "<tool_call>\n" + `{"lot":"a","count":1,"ok":true}` + "\n</tool_call>"
	for _, s := range []string{``, `Hello.`, `{"lot":"a"} as text`, `[1]`, call, call + "\n" + call} {
		if !g.Match(s) {
			t.Errorf("%q refused", s)
		}
	}
	for _, s := range []string{`<`, "<tool_call>\n{}", call + call, call + "\n", `<b>bold</b>`, " " + call} {
		if g.Match(s) {
			t.Errorf("%q accepted", s)
		}
	}
	one, err := JSONSchemaFramed([]byte(testSchemas["reading"]), Frame{Open: "<tool_call>\n", Close: "\n</tool_call>"})
	if err != nil {
		t.Fatal(err)
	}
	if !one.Match(call) || one.Match(call+"\n"+call) || one.Match("text") {
		t.Error("a single framed call: wrong language")
	}
}
