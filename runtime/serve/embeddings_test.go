package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

type embeddingsResponse struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func (f *fixture) embed(t *testing.T, body string) embeddingsResponse {
	t.Helper()
	resp, data := f.post(t, "/v1/embeddings", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", body, resp.StatusCode, data)
	}
	var r embeddingsResponse
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func vectorOf(t *testing.T, raw json.RawMessage) []float32 {
	t.Helper()
	var v []float32
	if err := json.Unmarshal(raw, &v); err == nil {
		return v
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("embedding %s", raw)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b)%4 != 0 {
		t.Fatalf("base64 embedding: %v (%d bytes)", err, len(b))
	}
	v = make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func diff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func TestEmbeddings(t *testing.T) {
	f := openFixture(t, Config{})
	ctx := context.Background()
	texts := []string{"Call me Ishmael.", "The whale", "Call me Ishmael."}
	goVecs, usage, err := f.eng.Embed(ctx, "tinylm", []engine.EmbedInput{{Text: texts[0]}, {Text: texts[1]}}, engine.EmbedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(texts)
	r := f.embed(t, `{"model":"tinylm","input":`+string(in)+`}`)
	if r.Object != "list" || r.Model != "tinylm" || len(r.Data) != 3 {
		t.Fatalf("response %+v", r)
	}
	for i, d := range r.Data {
		if d.Object != "embedding" || d.Index != i {
			t.Fatalf("data[%d] = %+v", i, d)
		}
	}
	v0, v1, v2 := vectorOf(t, r.Data[0].Embedding), vectorOf(t, r.Data[1].Embedding), vectorOf(t, r.Data[2].Embedding)
	if diff(v0, goVecs[0]) > 1e-5 || diff(v1, goVecs[1]) > 1e-5 || diff(v2, v0) > 1e-5 {
		t.Fatal("the HTTP vectors differ from the Go API's")
	}
	if diff(v0, v1) < 1e-3 {
		t.Fatal("different texts, same vector")
	}
	if r.Usage.PromptTokens != usage.PromptTokens+countTokens(f, texts[0]) || r.Usage.TotalTokens != r.Usage.PromptTokens {
		t.Fatalf("usage %+v (Go API: %d for the first two)", r.Usage, usage.PromptTokens)
	}
	// one string, and base64
	one := f.embed(t, `{"model":"tinylm","input":"The whale","encoding_format":"base64","user":"ahab"}`)
	if !strings.HasPrefix(string(one.Data[0].Embedding), `"`) {
		t.Fatalf("base64 embedding is %s", one.Data[0].Embedding[:20])
	}
	if d := diff(vectorOf(t, one.Data[0].Embedding), goVecs[1]); d != 0 {
		t.Fatalf("base64 decodes to a vector %g away from the Go API's", d)
	}
	// token ids: one array, and an array of arrays, equal the text
	ids := tokens(f, texts[1])
	idsJSON, _ := json.Marshal(ids)
	for _, body := range []string{`{"model":"tinylm","input":` + string(idsJSON) + `}`, `{"model":"tinylm","input":[` + string(idsJSON) + `,[1,2,3]]}`} {
		r := f.embed(t, body)
		if d := diff(vectorOf(t, r.Data[0].Embedding), goVecs[1]); d > 1e-5 {
			t.Fatalf("%s: token ids give a vector %g from the text's", body, d)
		}
	}
	// dimensions equal to the model's, pooling and normalize
	r = f.embed(t, `{"model":"tinylm","input":"The whale","dimensions":256,"edgeinfer":{"pooling":"last","normalize":false,"class":"batch"}}`)
	v := vectorOf(t, r.Data[0].Embedding)
	if len(v) != 256 || diff(v, goVecs[1]) < 1e-3 {
		t.Fatal("pooling last, unnormalised: the default vector")
	}
}

func tokens(f *fixture, text string) []int {
	return f.eng.Tokenizer("tinylm").EncodeWith(text, tokenizer.EncodeOptions{AddSpecialTokens: true, SplitSpecialTokens: true})
}

func countTokens(f *fixture, text string) int { return len(tokens(f, text)) }

func TestEmbeddingsErrors(t *testing.T) {
	f := openFixture(t, Config{})
	long := strings.Repeat("whale ", 400)
	for _, tc := range []struct {
		body   string
		status int
		param  string
	}{
		{`{"model":"moby","input":"x"}`, 404, "model"},
		{`{"model":"tinylm","input":""}`, 400, "input"},
		{`{"model":"tinylm","input":[]}`, 400, "input"},
		{`{"model":"tinylm","input":["a",""]}`, 400, "input[1]"},
		{`{"model":"tinylm","input":["a",[]]}`, 400, "input[1]"},
		{`{"model":"tinylm","input":["a",{"x":1}]}`, 400, "input[1]"},
		{`{"model":"tinylm"}`, 400, "input"},
		{`{"model":"tinylm","input":["a","` + long + `"]}`, 400, "input[1]"},
		{`{"model":"tinylm","input":"a","dimensions":64}`, 400, "dimensions"},
		{`{"model":"tinylm","input":"a","encoding_format":"int8"}`, 400, "encoding_format"},
		{`{"model":"tinylm","input":"a","truncate":true}`, 400, "truncate"},
		{`{"model":"tinylm","input":"a","edgeinfer":{"pooling":"max"}}`, 400, "edgeinfer.pooling"},
		{`{"model":"tiny-ids","input":[1,2]}`, 400, "model"},
		{`{"model":"tinylm","input":[1,99999]}`, 400, ""},
		{`{"model":"addone","input":"a"}`, 400, ""},
	} {
		resp, data := f.post(t, "/v1/embeddings", tc.body)
		e := apiErr(t, data)
		param := ""
		if e.Param != nil {
			param = *e.Param
		}
		if resp.StatusCode != tc.status || param != tc.param {
			t.Errorf("%.80s: %d param %q (%s), want %d %q", tc.body, resp.StatusCode, param, e.Message, tc.status, tc.param)
		}
		if tc.param == "input[1]" && strings.Contains(tc.body, "whale whale") && !strings.Contains(e.Message, "over the model's context of 256") {
			t.Errorf("too long: %s", e.Message)
		}
	}
}

// embeddingsScript calls the official OpenAI client's embeddings.create,
// float and base64 (which the client decodes itself), and prints the
// vectors.
const embeddingsScript = `
import OpenAI from 'openai';
const c = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'k', maxRetries: 0 });
const input = ['Call me Ishmael.', 'The whale'];
const f = await c.embeddings.create({ model: 'tinylm', input, encoding_format: 'float' });
const b = await c.embeddings.create({ model: 'tinylm', input });
let err = null;
try { await c.embeddings.create({ model: 'tinylm', input: 'x', dimensions: 8 }); } catch (e) { err = e; }
console.log(JSON.stringify({ float: f.data.map(d => d.embedding), base64: b.data.map(d => d.embedding), usage: f.usage,
  refused: err instanceof OpenAI.BadRequestError && err.param === 'dimensions' }));
`

func TestEmbeddingsOpenAIClient(t *testing.T) {
	f := openFixture(t, Config{})
	out, err := nodeScript(t, f, embeddingsScript, []string{"openai@7.55.0"})
	if err != nil {
		t.Fatalf("openai client: %v\n%s", err, out)
	}
	var got struct {
		Float, Base64 [][]float64
		Usage         struct {
			PromptTokens int `json:"prompt_tokens"`
		}
		Refused bool
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want, usage, err := f.eng.Embed(context.Background(), "tinylm", []engine.EmbedInput{{Text: "Call me Ishmael."}, {Text: "The whale"}}, engine.EmbedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, vs := range [][][]float64{got.Float, got.Base64} {
		if len(vs) != 2 {
			t.Fatalf("%d vectors", len(vs))
		}
		for i, v := range vs {
			w := make([]float32, len(v))
			for j, x := range v {
				w[j] = float32(x)
			}
			if d := diff(w, want[i]); d > 1e-6 {
				t.Fatalf("vector %d from the client is %g away from the Go API's", i, d)
			}
		}
	}
	if got.Usage.PromptTokens != usage.PromptTokens || !got.Refused {
		t.Fatalf("usage %d (want %d), dimensions refused: %v", got.Usage.PromptTokens, usage.PromptTokens, got.Refused)
	}
	t.Logf("openai client: 2 vectors of %d, float and base64, equal to the Go API's", len(got.Float[0]))
}
