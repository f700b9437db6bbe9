package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// TestModelsFollowTheEngine: the server reads the engine's models at each
// request, so a model unloaded is gone, one loaded after the server
// started is served, and one swapped is served with its new version's
// chat template.
func TestModelsFollowTheEngine(t *testing.T) {
	f := openFixture(t, Config{})
	ctx := context.Background()
	chat := func(model string) (int, int) {
		t.Helper()
		resp, data := f.post(t, "/v1/chat/completions", `{"model":"`+model+`","max_tokens":2,"messages":[{"role":"user","content":"Call me Ishmael"}]}`)
		var out struct{ Usage usage }
		json.Unmarshal(data, &out)
		return resp.StatusCode, out.Usage.PromptTokens
	}
	listed := func(model string) (ok, chat bool) {
		t.Helper()
		m, ok := f.listed(t)[model]
		return ok, m.Chat
	}
	code, templated := chat("tinychat")
	if code != 200 {
		t.Fatalf("tinychat: %d", code)
	}
	_, plain := chat("tinylm")
	if plain == templated {
		t.Fatalf("the template adds no tokens (%d): the test cannot tell the versions apart", plain)
	}

	if err := f.eng.Unload(ctx, "tinychat"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := listed("tinychat"); ok {
		t.Fatal("an unloaded model is still listed")
	}
	if code, _ := chat("tinychat"); code != 404 {
		t.Fatalf("an unloaded model answered %d", code)
	}
	if _, err := f.eng.Load(ctx, engine.ModelSpec{Name: "late", Dir: chatDir}); err != nil {
		t.Fatal(err)
	}
	if ok, c := listed("late"); !ok || !c {
		t.Fatalf("a model loaded after the server started: listed %v, chat template %v", ok, c)
	}
	if code, n := chat("late"); code != 200 || n != templated {
		t.Fatalf("a model loaded after the server started: %d, %d prompt tokens (want %d)", code, n, templated)
	}

	if _, err := f.eng.Swap(ctx, "tinylm", engine.ModelSpec{Dir: chatDir}, nil); err != nil {
		t.Fatal(err)
	}
	if _, c := listed("tinylm"); !c {
		t.Fatal("tinylm swapped to a version with a chat template lists none")
	}
	if code, n := chat("tinylm"); code != 200 || n != templated {
		t.Fatalf("swapped tinylm: %d, %d prompt tokens: want %d, its new template's", code, n, templated)
	}
}

// syncBuffer is a bytes.Buffer for a logger written from handlers; wrote
// gets a wake-up after each write.
type syncBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.wrote <- struct{}{}:
	default: // a wake-up is already pending
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRequestLog: with a logger, each request is a line at Info with its
// method, path, status, model, duration and tokens (what serve -v shows).
func TestRequestLog(t *testing.T) {
	f := openFixture(t, Config{})
	buf := syncBuffer{wrote: make(chan struct{}, 1)}
	srv, err := New(f.eng, Config{}, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	for _, stream := range []string{"false", "true"} {
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"tinylm","prompt":"Call me Ishmael","max_tokens":3,"stream":`+stream+`}`))
		if err != nil {
			t.Fatal(err)
		}
		readSSE(t, resp) // reads the whole body either way
		resp.Body.Close()
	}
	resp, err := http.Get(ts.URL + "/v1/models/moby")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// A line is written as its handler returns, which may be just after
	// the client has read the answer (so in any order).
	deadline := time.After(10 * time.Second)
wait:
	for strings.Count(buf.String(), "msg=request") < 3 {
		select {
		case <-buf.wrote:
		case <-deadline:
			break wait
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines for 3 requests:\n%s", len(lines), buf.String())
	}
	generations := 0
	for _, l := range lines {
		switch {
		case !strings.Contains(l, "level=INFO msg=request method=") || !strings.Contains(l, "duration="):
			t.Errorf("not a request line: %s", l)
		case strings.Contains(l, "method=POST path=/v1/completions status=200 model=tinylm") && strings.Contains(l, " tokens=3"):
			generations++
		case !strings.Contains(l, "method=GET path=/v1/models/moby status=404"):
			t.Errorf("unexpected line: %s", l)
		}
	}
	if generations != 2 {
		t.Errorf("%d lines for the 2 completions (method, path, status, model and tokens=3):\n%s", generations, buf.String())
	}
}
