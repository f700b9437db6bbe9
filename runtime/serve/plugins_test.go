package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/plugintest"
)

// TestPluginModel: a decoder bundle with the redact (pre) and jsonout
// (post) plugins is served through them: the prompt goes by text, the
// answer carries the post plugin's result (whole and streamed), and
// token-id prompts are refused with what to send instead.
func TestPluginModel(t *testing.T) {
	orttest.Need(t)
	ctx := context.Background()
	dir := plugintest.TextBundle(t, filepath.Join("..", "..", "examples", "tinylm"), "tiny-plug")
	cfg := engine.Config{Models: []engine.ModelSpec{{Dir: dir}}}
	cfg.Session.IntraOpThreads = 1
	e, err := engine.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	srv, err := New(e, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	post := func(body string) (int, []byte) {
		t.Helper()
		r, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		return r.StatusCode, b
	}
	code, data := post(`{"model":"tiny-plug","prompt":"Mail ishmael@pequod.example about","max_tokens":8,"temperature":0}`)
	var whole struct {
		Usage     usage `json:"usage"`
		Edgeinfer struct {
			Result map[string]json.RawMessage `json:"result"`
		} `json:"edgeinfer"`
	}
	if err := json.Unmarshal(data, &whole); code != 200 || err != nil {
		t.Fatalf("%d %s: %v", code, data, err)
	}
	if string(whole.Edgeinfer.Result["redacted"]) != `{"data":[1],"shape":[1]}` || whole.Edgeinfer.Result["json"] == nil {
		t.Errorf("result %s", data)
	}
	redacted := e.Tokenizer("tiny-plug").Encode("Mail [email] about")
	if whole.Usage.PromptTokens < len(redacted) || whole.Usage.PromptTokens > len(redacted)+2 {
		t.Errorf("prompt tokens %d, the redacted prompt has %d", whole.Usage.PromptTokens, len(redacted))
	}
	code, data = post(`{"model":"tiny-plug","prompt":"Mail ishmael@pequod.example about","max_tokens":8,"stream":true}`)
	if code != 200 || !strings.Contains(string(data), `"edgeinfer":{"result":{`) || !strings.HasSuffix(strings.TrimSpace(string(data)), "[DONE]") {
		t.Errorf("stream %d:\n%s", code, data)
	}
	if code, data = post(`{"model":"tiny-plug","prompt":[1,2,3],"max_tokens":2}`); code != 400 || !strings.Contains(string(data), "text_plugin") {
		t.Errorf("token ids: %d %s", code, data)
	}
	r, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"tiny-plug","messages":[{"role":"user","content":"call +49 30 1234 5678"}],"max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Errorf("chat: %d", r.StatusCode)
	}
}
