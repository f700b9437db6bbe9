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

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/sched"
)

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
			time.Sleep(2 * time.Millisecond)
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
	var text strings.Builder
	for tok, err := range h.GenerateTokens(context.Background(), "m", []int32{1, 2, 3}, engine.GenerateOptions{MaxTokens: 8}) {
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(tok.Text)
	}
	recs := h.Records()
	if text.String() != "w0 w1 w2 w3 w4 " || len(recs) != 1 {
		t.Fatalf("text %q, %d records", text.String(), len(recs))
	}
	r := recs[0]
	// 6 tokens by usage over 5 events: the last event's two share its time.
	if r.Outcome != sched.OutcomeCompleted || r.PromptTokens != 11 || len(r.TokenTimes) != 6 || !r.TokenTimes[5].Equal(r.TokenTimes[4]) ||
		r.TTFT() <= 0 || r.FirstScheduled != (time.Time{}) {
		t.Fatalf("%+v", r)
	}
	if len(h.Records()) != 0 {
		t.Fatal("Records does not drain")
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
	var got error
	for _, err := range h.GenerateTokens(context.Background(), "other", []int32{1}, engine.GenerateOptions{}) {
		got = err
	}
	var oe *sched.OverloadError
	if !errors.As(got, &oe) || oe.RetryAfter != 2*time.Second {
		t.Fatalf("%v", got)
	}
	if r := h.Records(); len(r) != 1 || r[0].Outcome != sched.OutcomeRejected {
		t.Fatalf("%+v", r)
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
