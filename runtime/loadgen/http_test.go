package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// records collects what an HTTPTarget reports.
type records struct{ tls []*metrics.Timeline }

func (r *records) ObserveTimeline(t *metrics.Timeline) { r.tls = append(r.tls, t) }

// fakeOpenAI is a minimal OpenAI-compatible server for the client logic:
// it streams `events` text events, packing two tokens into the last one
// (as servers that batch their output do), then usage.
func fakeOpenAI(t *testing.T, events int, status int) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "fake/1.0")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"other","owned_by":"x"},{"id":"m","owned_by":"someone"}]}`)
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"version":"0.9"}`) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		if status != 200 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(status)
			fmt.Fprint(w, `{"error":{"message":"busy"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"w%d \",\"index\":0}]}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(2 * time.Millisecond) // on purpose: the fake server streams its events apart
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", events+1)
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func TestHTTPTarget(t *testing.T) {
	ts := fakeOpenAI(t, 5, 200)
	h, err := NewHTTPTarget(context.Background(), ts.URL+"/v1/", "m", HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if i := h.Info(); i.Model != "m" || i.OwnedBy != "someone" || i.Server != "fake/1.0" || i.Reported["/version"] != `{"version":"0.9"}` || len(i.Unknown) == 0 {
		t.Fatalf("%+v", i)
	}
	var recs records
	remove := h.Observe(&recs)
	var text strings.Builder
	for tok, err := range h.generate(context.Background(), "m", []int32{1, 2, 3}, engine.GenerateOptions{MaxTokens: 8}) {
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(tok.Text)
	}
	if text.String() != "w0 w1 w2 w3 w4 " || len(recs.tls) != 1 {
		t.Fatalf("text %q, %d records", text.String(), len(recs.tls))
	}
	r := recs.tls[0]
	// 6 tokens by usage over 5 events: the last event's two share its time.
	ttft, ok := r.TTFT()
	if r.Outcome != metrics.Completed || r.PromptTokens != 11 || r.OutputTokens != 6 || r.Tokens[5] != r.Tokens[4] ||
		!ok || ttft <= 0 || !r.FirstScheduled.IsZero() {
		t.Fatalf("%+v", r)
	}
	remove()
	for range h.generate(context.Background(), "m", []int32{1}, engine.GenerateOptions{}) {
	}
	if len(recs.tls) != 1 {
		t.Fatal("a removed observer is still told")
	}
	if _, err := NewHTTPTarget(context.Background(), ts.URL, "nope", HTTPOptions{}); !errors.Is(err, ErrModel) || !strings.Contains(err.Error(), "other") {
		t.Fatalf("unknown model: %v", err)
	}
	if _, err := NewHTTPTarget(context.Background(), "ftp://x", "", HTTPOptions{}); !errors.Is(err, ErrTarget) {
		t.Fatalf("bad url: %v", err)
	}
}

func TestHTTPTargetOverload(t *testing.T) {
	h, err := NewHTTPTarget(context.Background(), fakeOpenAI(t, 0, 429).URL, "", HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var recs records
	h.Observe(&recs)
	var got error
	for _, err := range h.generate(context.Background(), "other", []int32{1}, engine.GenerateOptions{}) {
		got = err
	}
	var oe *engine.OverloadError
	if !errors.As(got, &oe) || oe.RetryAfter != 2*time.Second || !errors.Is(got, engine.ErrOverloaded) {
		t.Fatalf("%v", got)
	}
	if len(recs.tls) != 1 || recs.tls[0].Outcome != metrics.Rejected {
		t.Fatalf("%+v", recs.tls)
	}
}

func TestParseResources(t *testing.T) {
	r := parseResources("# HELP go_goroutines x\ngo_goroutines 12\nprocess_resident_memory_bytes 1.048576e+08\n" +
		"edgeinfer_engine_kv_blocks_used{model=\"a\"} 3\nedgeinfer_engine_kv_blocks_used{model=\"b\"} 4\nbroken\nx \n")
	if !r.Known || r.Goroutines != 12 || r.RSSBytes != 100<<20 || r.KVBlocksUsed != 7 {
		t.Fatalf("%+v", r)
	}
	if r := parseResources("llamacpp:tokens_predicted_total 5\n"); r.Known {
		t.Fatalf("a server without them: %+v", r)
	}
}
