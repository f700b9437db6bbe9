package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

func TestChatCompletion(t *testing.T) {
	f := openFixture(t, Config{})
	resp, data := f.post(t, "/v1/chat/completions", `{"model":"tinylm","max_tokens":8,"messages":[{"role":"user","content":"Call me Ishmael"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	var out struct {
		Object  string `json:"object"`
		Choices []struct {
			Message      struct{ Role, Content string } `json:"message"`
			FinishReason string                         `json:"finish_reason"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	c := out.Choices[0]
	if out.Object != "chat.completion" || c.Message.Role != "assistant" || c.Message.Content == "" || c.FinishReason != "length" ||
		out.Usage.CompletionTokens != 8 || out.Usage.PromptTokens == 0 || out.Usage.TotalTokens != out.Usage.PromptTokens+8 {
		t.Fatalf("%s", data)
	}
	// A stop string ends the answer there: finish_reason "stop".
	_, data = f.post(t, "/v1/chat/completions", `{"model":"tinylm","max_tokens":40,"temperature":0,"stop":[" "],"messages":[{"role":"user","content":"Call me Ishmael"}]}`)
	out.Choices = nil
	json.Unmarshal(data, &out)
	if c := out.Choices[0]; c.FinishReason != "stop" || strings.Contains(c.Message.Content, " ") || out.Usage.CompletionTokens >= 40 {
		t.Fatalf("stop string: %s", data)
	}
	// The same seed and sampling give the same answer.
	body := `{"model":"tinylm","max_tokens":12,"temperature":0.9,"top_p":0.9,"top_k":40,"seed":7,"messages":[{"role":"user","content":"The whale"}]}`
	_, a := f.post(t, "/v1/chat/completions", body)
	_, b := f.post(t, "/v1/chat/completions", body)
	var ra, rb map[string]any
	json.Unmarshal(a, &ra)
	json.Unmarshal(b, &rb)
	if fmt.Sprint(ra["choices"]) != fmt.Sprint(rb["choices"]) {
		t.Fatalf("seeded answers differ:\n%s\n%s", a, b)
	}
}

func TestChatTemplateStops(t *testing.T) {
	f := openFixture(t, Config{})
	for _, m := range f.eng.Models() {
		if m.Name == "tinychat" && (!m.ChatTemplate || m.TurnEnd != "<|endoftext|>") {
			t.Fatalf("tinychat: chat %v turn end %q", m.ChatTemplate, m.TurnEnd)
		}
	}
	resp, data := f.post(t, "/v1/chat/completions", `{"model":"tinychat","max_tokens":40,"messages":[{"role":"user","content":"Call me Ishmael"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	if bytes.Contains(data, []byte("<|endoftext|>")) {
		t.Fatalf("the turn-end marker leaked into the answer: %s", data)
	}
}

// readSSE returns the data lines of an event stream.
func readSSE(t testing.TB, resp *http.Response) []string {
	t.Helper()
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	return events
}

func TestStreamingCompletion(t *testing.T) {
	f := openFixture(t, Config{})
	resp, err := http.Post(f.ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"tinylm","prompt":"Call me Ishmael","max_tokens":10,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ev := readSSE(t, resp)
	if len(ev) < 4 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	var text strings.Builder
	var fin string
	var u *usage
	for _, e := range ev[:len(ev)-1] {
		var c struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Text)
			if c.Choices[0].FinishReason != nil {
				fin = *c.Choices[0].FinishReason
			}
		}
		if c.Usage != nil {
			u = c.Usage
		}
	}
	if text.Len() == 0 || fin != "length" || u == nil || u.CompletionTokens != 10 {
		t.Fatalf("text %q finish %q usage %+v", text.String(), fin, u)
	}
}

func TestBadRequests(t *testing.T) {
	f := openFixture(t, Config{MaxBodyBytes: 4096})
	long := strings.Repeat("whale ", 400)
	for _, tt := range []struct {
		name, body string
		status     int
		param      string
		want       string
	}{
		{"not json", `{"model": "tinylm", "messages": [}`, 400, "", "not valid JSON at byte"},
		{"wrong type", `{"model":"tinylm","max_tokens":"ten","messages":[{"role":"user","content":"x"}]}`, 400, "max_tokens", "want an integer, got a JSON string"},
		{"wrong nested type", `{"model":"tinylm","messages":[{"role":7,"content":"x"}]}`, 400, "messages.role", "want a string"},
		{"no model", `{"messages":[{"role":"user","content":"x"}]}`, 400, "model", "required"},
		{"unknown model", `{"model":"moby","messages":[{"role":"user","content":"x"}]}`, 404, "model", "tinylm"},
		{"one-shot model", `{"model":"addone","messages":[{"role":"user","content":"x"}]}`, 400, "model", "/v1/infer/addone"},
		{"n", `{"model":"tinylm","n":2,"messages":[{"role":"user","content":"x"}]}`, 400, "n", "only 1"},
		{"role", `{"model":"tinylm","messages":[{"role":"captain","content":"x"}]}`, 400, "messages[0].role", "captain"},
		{"no messages", `{"model":"tinylm"}`, 400, "messages", "required"},
		{"temperature", `{"model":"tinylm","temperature":3,"messages":[{"role":"user","content":"x"}]}`, 400, "temperature", "[0, 2]"},
		{"image part", `{"model":"tinylm","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "messages[0].content[0].type", "text only"},
		{"class", `{"model":"tinylm","edgeinfer":{"class":"vip"},"messages":[{"role":"user","content":"x"}]}`, 400, "edgeinfer.class", "vip"},
		{"oversized", `{"model":"tinylm","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "", "4096 bytes"},
		{"past context", `{"model":"tinylm","messages":[{"role":"user","content":"` + long + `"}]}`, 400, "messages", "maximum context length is 256 tokens"},
		{"past context with max_tokens", `{"model":"tinylm","prompt":"Call me Ishmael","max_tokens":300}`, 400, "prompt", "300 in the completion"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := "/v1/chat/completions"
			if strings.Contains(tt.body, `"prompt"`) {
				path = "/v1/completions"
			}
			resp, data := f.post(t, path, tt.body)
			e := apiErr(t, data)
			param := ""
			if e.Param != nil {
				param = *e.Param
			}
			if resp.StatusCode != tt.status || param != tt.param || !strings.Contains(e.Message, tt.want) {
				t.Fatalf("%d param %q: %s; want %d param %q containing %q", resp.StatusCode, param, e.Message, tt.status, tt.param, tt.want)
			}
		})
	}
	// The context error carries the token counts.
	_, data := f.post(t, "/v1/completions", `{"model":"tinylm","prompt":"`+long+`"}`)
	if e := apiErr(t, data); e.Code == nil || *e.Code != "context_length_exceeded" || !strings.Contains(e.Message, "in the prompt") {
		t.Fatalf("%+v", e)
	}
}

func TestOverload(t *testing.T) {
	f := openFixture(t, Config{})
	// The scheduler predicts from what it has measured: one request first.
	f.post(t, "/v1/completions", `{"model":"tinylm","prompt":"Call me Ishmael","max_tokens":2}`)
	for _, stream := range []bool{false, true} {
		resp, data := f.post(t, "/v1/chat/completions", fmt.Sprintf(`{"model":"tinylm","stream":%v,"messages":[{"role":"user","content":"Call me Ishmael"}],
			"edgeinfer":{"class":"realtime","ttft_ms":0.001,"fail_fast":true}}`, stream))
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("stream %v: %d Retry-After %q %s", stream, resp.StatusCode, resp.Header.Get("Retry-After"), data)
		}
		if e := apiErr(t, data); e.Type != "rate_limit_error" {
			t.Fatalf("%+v", e)
		}
	}
	// The same through the headers.
	resp, _ := f.post(t, "/v1/completions", `{"model":"tinylm","prompt":"Call me Ishmael"}`,
		"X-Edgeinfer-SLO", "ttft=1us", "X-Edgeinfer-Fail-Fast", "1")
	if resp.StatusCode != 429 {
		t.Fatalf("headers: %d", resp.StatusCode)
	}
}

func TestAuth(t *testing.T) {
	f := openFixture(t, Config{Token: "s3cret"})
	resp, data := f.post(t, "/v1/completions", `{"model":"tinylm","prompt":"x","max_tokens":1}`)
	if resp.StatusCode != 401 || apiErr(t, data).Type != "authentication_error" {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	if resp, _ := f.post(t, "/v1/completions", `{"model":"tinylm","prompt":"x","max_tokens":1}`, "Authorization", "Bearer s3cret"); resp.StatusCode != 200 {
		t.Fatalf("with the token: %d", resp.StatusCode)
	}
	if r, err := http.Get(f.ts.URL + "/health"); err != nil || r.StatusCode != 200 {
		t.Fatalf("/health needs no token: %v %v", r, err)
	}
}

// TestConcurrentClients runs 32 streaming clients at once: all finish,
// and the records show the engine batched them (requests overlapping in
// the scheduler).
func TestConcurrentClients(t *testing.T) {
	f := openFixture(t, Config{})
	next := watch(t, f.eng)
	const clients = 32
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Go(func() {
			resp, err := http.Post(f.ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(fmt.Sprintf(
				`{"model":"tinylm","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"Client %d: call me Ishmael"}]}`, i)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			ev := readSSE(t, resp)
			if resp.StatusCode != 200 || len(ev) == 0 || ev[len(ev)-1] != "[DONE]" {
				errs <- fmt.Errorf("client %d: %d, %d events", i, resp.StatusCode, len(ev))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	tls := make([]*metrics.Timeline, clients)
	for i := range tls {
		tls[i] = next()
	}
	// Peak overlap of [first scheduled, finished] across the records.
	peak := 0
	for _, a := range tls {
		n := 0
		for _, b := range tls {
			if !b.FirstScheduled.After(a.FirstScheduled) && b.Finished.After(a.FirstScheduled) {
				n++
			}
		}
		peak = max(peak, n)
	}
	if peak < 2 {
		t.Fatalf("no two requests ran together (peak %d): no continuous batching", peak)
	}
	t.Logf("32 clients: peak %d requests running together", peak)
}

// TestDisconnectFreesKV drops a client mid-stream: its request is
// cancelled and its KV blocks come back.
func TestDisconnectFreesKV(t *testing.T) {
	f := openFixture(t, Config{})
	next := watch(t, f.eng)
	conn, err := net.Dial("tcp", f.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"tinylm","stream":true,"max_tokens":200,"messages":[{"role":"user","content":"Call me Ishmael"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	rd := bufio.NewReader(conn)
	for seen := 0; seen < 3; {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			seen++
		}
	}
	if kv := f.eng.Stats().KV["tinylm"]; kv.BlocksUsed == 0 {
		t.Fatalf("no KV in use mid-stream: %+v", kv)
	}
	conn.Close()
	// The request's record comes after its KV went back (the scheduler
	// frees a request's KV before it records it).
	if r := next(); r.Outcome != metrics.Cancelled {
		t.Fatalf("the dropped stream ended %s, want cancelled", r.Outcome)
	}
	if st := f.eng.Stats(); st.Scheduler.Running != 0 || st.KV["tinylm"].BlocksUsed != 0 {
		t.Fatalf("KV not freed when the client left: %+v", st)
	}
}

func TestModelsAndProbes(t *testing.T) {
	f := openFixture(t, Config{})
	r, err := http.Get(f.ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}
	json.NewDecoder(r.Body).Decode(&list)
	r.Body.Close()
	if list.Object != "list" || len(list.Data) != 4 || list.Data[2].ID != "tinychat" || !list.Data[2].Chat || list.Data[3].Context != 256 || list.Data[1].ID != "tiny-ids" {
		t.Fatalf("%+v", list)
	}
	for path, want := range map[string]int{"/ready": 200, "/health": 200, "/version": 200, "/v1/models/tinylm": 200, "/v1/models/nope": 404, "/v2/x": 404} {
		r, err := http.Get(f.ts.URL + path)
		if err != nil || r.StatusCode != want {
			t.Errorf("%s: %v %v, want %d", path, r.StatusCode, err, want)
		}
	}
}

func TestInfer(t *testing.T) {
	f := openFixture(t, Config{})
	resp, data := f.post(t, "/v1/infer/addone", `{"inputs":{"x":{"dtype":"float32","shape":[2,3],"data":[1,2,3,4,5,6]}}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	var out struct {
		Outputs map[string]jsonTensor `json:"outputs"`
	}
	json.Unmarshal(data, &out)
	if y := out.Outputs["y"]; fmt.Sprint(y.Shape, y.Data) != "[2 3] [2 3 4 5 6 7]" {
		t.Fatalf("%s", data)
	}
	// The same as a .npy body.
	var npy bytes.Buffer
	hdr := "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }"
	hdr += strings.Repeat(" ", 63-(10+len(hdr))%64) + "\n"
	npy.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&npy, binary.LittleEndian, uint16(len(hdr)))
	npy.WriteString(hdr)
	for _, v := range []float32{0.5, -1, 10} {
		binary.Write(&npy, binary.LittleEndian, math.Float32bits(v))
	}
	r, err := http.Post(f.ts.URL+"/v1/infer/addone", "application/x-npy", &npy) // its only input

	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(r.Body).Decode(&out)
	r.Body.Close()
	if y := out.Outputs["y"]; r.StatusCode != 200 || fmt.Sprint(y.Data) != "[1.5 0 11]" {
		t.Fatalf("npy: %d %+v", r.StatusCode, out)
	}
	for body, want := range map[string]string{
		`{"inputs":{"x":{"dtype":"float32","shape":[2,3],"data":[1]}}}`: "inputs.x: data has 1 values",
		`{"inputs":{"x":{"dtype":"complex","shape":[1],"data":[1]}}}`:   "dtype",
		`{}`: "inputs: required",
	} {
		resp, data := f.post(t, "/v1/infer/addone", body)
		if e := apiErr(t, data); resp.StatusCode != 400 || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %d %s", body, resp.StatusCode, e.Message)
		}
	}
}

// TestMetricsPromtool checks /metrics with Prometheus's own linter.
func TestMetricsPromtool(t *testing.T) {
	f := openFixture(t, Config{})
	next := watch(t, f.eng) // observers run in order: the server's collector sees a record first
	f.post(t, "/v1/completions", `{"model":"tinylm","prompt":"Call me","max_tokens":4}`)
	next()
	r, err := http.Get(f.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.ReadFrom(r.Body)
	r.Body.Close()
	for _, want := range []string{`edgeinfer_requests_total{class="interactive",model="tinylm",outcome="completed"} 1`, "edgeinfer_engine_kv_blocks{model=\"tinylm\"}",
		`edgeinfer_engine_kv_evictions_total{model="tinylm"} 0`, `edgeinfer_engine_prefix_query_tokens_total{model="tinylm"}`,
		`edgeinfer_http_requests_total{code="200",path="/v1/completions"} 1`, "go_goroutines", "edgeinfer_ttft_seconds_bucket",
		`edgeinfer_engine_decode_steps_total{model="tinylm",rows="1"}`, `edgeinfer_engine_decode_graph_seconds_total{model="tinylm",rows="1"}`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus): /metrics not linted")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

type observerFunc func(*metrics.Timeline)

func (f observerFunc) ObserveTimeline(t *metrics.Timeline) { f(t) }

// watch observes b's records for the rest of the test: next returns the
// next one, waiting for it (the test fails after 10 s without one).
func watch(t testing.TB, b interface {
	Observe(metrics.Observer) (remove func())
}) (next func() *metrics.Timeline) {
	ch := make(chan *metrics.Timeline, 1024)
	t.Cleanup(b.Observe(observerFunc(func(tl *metrics.Timeline) { ch <- tl })))
	return func() *metrics.Timeline {
		t.Helper()
		timeout := time.NewTimer(10 * time.Second)
		defer timeout.Stop()
		select {
		case tl := <-ch:
			return tl
		case <-timeout.C:
			t.Fatal("no request record within 10 s")
			return nil
		}
	}
}

// TestShutdownDrains starts a stream, then shuts the server down: the
// stream finishes with [DONE], new requests are refused, Serve returns
// nil.
func TestShutdownDrains(t *testing.T) {
	f := openFixture(t, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(f.eng, Config{DrainTimeout: 20 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"tinylm","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"Call me Ishmael"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	var last string
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "data: ") {
			last = strings.TrimSpace(line)
		}
	}
	resp.Body.Close()
	if last != "data: [DONE]" {
		t.Fatalf("the stream was cut during the drain: last event %q", last)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestTokenIDs: a model without a tokenizer takes token ids and answers
// with them, one event per token when streamed (so a benchmark times each
// token), the same greedy ids as the whole answer.
func TestTokenIDs(t *testing.T) {
	f := openFixture(t, Config{})
	body := `{"model":"tiny-ids","prompt":[5,6,7,8,9],"max_tokens":6,"temperature":0%s}`
	_, data := f.post(t, "/v1/completions", fmt.Sprintf(body, ""))
	var whole struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &whole); err != nil || len(whole.Choices) != 1 || len(whole.Choices[0].TokenIDs) != 6 {
		t.Fatalf("whole answer %s: %v", data, err)
	}
	resp, err := http.Post(f.ts.URL+"/v1/completions", "application/json", strings.NewReader(fmt.Sprintf(body, `,"stream":true`)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var streamed []int32
	for _, e := range readSSE(t, resp) {
		var c struct {
			Choices []struct {
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
		}
		if e != "[DONE]" && json.Unmarshal([]byte(e), &c) == nil && len(c.Choices) > 0 {
			if n := len(c.Choices[0].TokenIDs); n > 1 {
				t.Fatalf("event with %d ids: %s", n, e)
			}
			streamed = append(streamed, c.Choices[0].TokenIDs...)
		}
	}
	if !slices.Equal(streamed, whole.Choices[0].TokenIDs) {
		t.Errorf("streamed %v, whole %v", streamed, whole.Choices[0].TokenIDs)
	}
	r, data := f.post(t, "/v1/completions", `{"model":"tiny-ids","prompt":"text"}`)
	if r.StatusCode != 400 || !strings.Contains(string(data), "no tokenizer") {
		t.Errorf("text prompt to a model without a tokenizer: %d %s", r.StatusCode, data)
	}
}
