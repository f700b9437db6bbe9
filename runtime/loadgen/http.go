package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// HTTPTarget drives any OpenAI-compatible server (edgeinfer serve,
// llama-server, Ollama, vLLM) over HTTP, so one harness measures them
// all the same way (RunTarget). Each request is a streamed
// POST /v1/completions with stream_options.include_usage, and its
// timeline is stamped on the client: arrived when the request is sent,
// a token time at every server-sent event that carries text, finished at
// the end of the stream. Token counts come from the server's usage (when
// one event carries several tokens they share its time: that is what a
// client sees); queue time is not visible from outside and stays unknown.
//
// Prompts: the workload's token ids are sent as words of a fixed
// vocabulary (the remote model's tokenizer is not known here), or, with
// HTTPOptions.Tokenizer, decoded to text by that tokenizer; the server's
// usage.prompt_tokens is what the report counts.
//
// An HTTPTarget is safe for concurrent use.
type HTTPTarget struct {
	base   *url.URL
	model  string
	client *http.Client
	token  string
	tok    *tokenizer.Tokenizer
	ids    int // HTTPOptions.PromptIDs
	info   TargetInfo

	mu       sync.Mutex
	obs      []engine.Observer
	id       uint64
	inflight atomic.Int64
	tokens   atomic.Uint64

	resMu sync.Mutex
	resAt time.Time
	res   Resources
}

// HTTPOptions configures an HTTPTarget.
type HTTPOptions struct {
	// Token is sent as a bearer token when set.
	Token string
	// Tokenizer, when set, turns prompt ids into text (and lets a corpus
	// be used); nil sends words of the built-in vocabulary.
	Tokenizer *tokenizer.Tokenizer
	// PromptIDs, when > 0, sends each prompt as its token ids (the
	// OpenAI API's list form of prompt), drawn below this vocabulary
	// size: the exact workload tokens, for a model served without a
	// tokenizer, or to give two servers of one model the same prompts.
	PromptIDs int
	// Client is the HTTP client; nil means one without a timeout (the
	// spec's request_timeout bounds each request).
	Client *http.Client
}

// TargetInfo is what the server says about itself, for the version
// matrix. What a server does not report (its quantisation, its device,
// its threads) is "unknown".
type TargetInfo struct {
	URL   string `json:"url"`
	Model string `json:"model"`
	// Server is the Server response header.
	Server string `json:"server"`
	// OwnedBy is the model object's owned_by.
	OwnedBy string `json:"owned_by"`
	// Reported holds the bodies of the informational endpoints that
	// answered (/version, /props, /api/version), by path, truncated.
	Reported map[string]string `json:"reported"`
	// Unknown lists what cannot be known from outside, with why.
	Unknown []string `json:"unknown"`
}

// NewHTTPTarget checks the server lists model (GET /v1/models; "" takes
// the first it lists) and asks it about itself.
func NewHTTPTarget(ctx context.Context, baseURL, model string, opt HTTPOptions) (*HTTPTarget, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: target %q: want http://HOST:PORT or https://…", ErrTarget, baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/v1")
	h := &HTTPTarget{base: u, client: opt.Client, token: opt.Token, tok: opt.Tokenizer, ids: opt.PromptIDs}
	if h.client == nil {
		h.client = &http.Client{}
	}
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	resp, body, err := h.get(ctx, "/v1/models")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTarget, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s/v1/models: %s: %.200s", ErrTarget, u, resp.Status, body)
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("%w: GET %s/v1/models: not an OpenAI model list: %v", ErrTarget, u, err)
	}
	var names []string
	for _, m := range list.Data {
		names = append(names, m.ID)
		if model == "" || m.ID == model {
			h.model, h.info.OwnedBy = m.ID, m.OwnedBy
			break
		}
	}
	if h.model == "" {
		return nil, fmt.Errorf("%w: the server at %s does not list model %q (it lists %v)", ErrModel, u, model, names)
	}
	h.info.URL, h.info.Model, h.info.Server = u.String(), h.model, resp.Header.Get("Server")
	h.info.Reported = map[string]string{}
	for _, p := range []string{"/version", "/props", "/api/version"} {
		if r, b, err := h.get(ctx, p); err == nil && r.StatusCode == http.StatusOK && json.Valid(b) {
			h.info.Reported[p] = truncate(string(b), 2000)
		}
	}
	h.info.Unknown = []string{
		"quantisation: an OpenAI-compatible server does not report it",
		"device, execution provider, threads: not reported",
		"queue time: only the server sees when a request is first scheduled",
		"KV cache: not reported",
	}
	return h, nil
}

func (h *HTTPTarget) get(ctx context.Context, path string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base.String()+path, nil)
	if err != nil {
		return nil, nil, err
	}
	h.auth(req)
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, b, err
}

func (h *HTTPTarget) auth(r *http.Request) {
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
}

// Info is what the server said about itself.
func (h *HTTPTarget) Info() TargetInfo { return h.info }

// promptText turns the workload's ids into text.
func (h *HTTPTarget) promptText(ids []int32) string {
	if h.tok != nil {
		p := make([]int, len(ids))
		for i, id := range ids {
			p[i] = int(id)
		}
		if s, err := h.tok.Decode(p); err == nil {
			return s
		}
	}
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(promptWords[int(id)%len(promptWords)])
	}
	return b.String()
}

// generate sends one streamed completion and yields a token per event
// that carries text; its record goes to the observers when it ends.
func (h *HTTPTarget) generate(ctx context.Context, model string, prompt []int32, opts engine.GenerateOptions) iter.Seq2[engine.Token, error] {
	return func(yield func(engine.Token, error) bool) {
		h.mu.Lock()
		h.id++
		id := h.id
		h.mu.Unlock()
		tl := metrics.NewTimeline(id, opts.Class.String(), time.Time{}, 0)
		tl.Model, tl.Kind, tl.PromptTokens = model, engine.KindGenerate.String(), len(prompt)
		tl.SLO = metrics.SLO{TTFT: opts.SLO.TTFT, TPOT: opts.SLO.TPOT, E2E: opts.SLO.Deadline}
		tl.FailFast = opts.FailFast
		h.inflight.Add(1)
		defer h.inflight.Add(-1)
		usageOut, err := h.stream(ctx, tl, prompt, opts, yield)
		// Tokens that arrived in one event share its time.
		for n := len(tl.Tokens); n > 0 && n < usageOut; n++ {
			tl.Token(tl.Arrived.Add(tl.Tokens[n-1]))
		}
		var oe *engine.OverloadError
		outcome := metrics.Completed
		switch {
		case err == nil:
		case errors.As(err, &oe):
			outcome, tl.RefusedInQueue = metrics.Rejected, oe.Late
		case errors.Is(err, context.DeadlineExceeded):
			outcome = metrics.TimedOut
		case errors.Is(err, context.Canceled), errors.Is(err, errStopped):
			outcome = metrics.Cancelled
		default:
			outcome = metrics.Failed
		}
		if err != nil {
			tl.Err = err.Error()
		}
		if tl.Arrived.IsZero() {
			tl.Arrived = time.Now()
		}
		tl.Finish(time.Now(), outcome)
		h.mu.Lock()
		obs := h.obs
		h.mu.Unlock()
		for _, o := range obs {
			o.ObserveTimeline(tl)
		}
		if err != nil && !errors.Is(err, errStopped) {
			yield(engine.Token{}, err)
		}
	}
}

// refusal is a server's 429 or 503: an *engine.OverloadError to
// errors.As, the server's answer in its text.
type refusal struct {
	status, body string
	oe           *engine.OverloadError
}

func (r *refusal) Error() string {
	return fmt.Sprintf("loadgen: %s, retry after %v: %.300s", r.status, r.oe.RetryAfter, r.body)
}

func (r *refusal) Unwrap() error { return r.oe }

// errStopped is the caller breaking out of the token loop.
var errStopped = errors.New("loadgen: stopped by the caller")

// stream runs one request, stamping tl; it returns the server's
// completion token count and how the request ended.
func (h *HTTPTarget) stream(ctx context.Context, tl *metrics.Timeline, prompt []int32, opts engine.GenerateOptions, yield func(engine.Token, error) bool) (int, error) {
	var p any = h.promptText(prompt)
	if h.ids > 0 {
		p = prompt
	}
	body := map[string]any{"model": h.model, "prompt": p, "stream": true,
		"stream_options": map[string]bool{"include_usage": true}, "temperature": 0}
	if opts.MaxTokens > 0 {
		body["max_tokens"] = opts.MaxTokens
	}
	// edgeinfer's extension; other servers ignore unknown fields.
	ext := map[string]any{"class": opts.Class.String()}
	if s := opts.SLO; s.TTFT > 0 || s.TPOT > 0 || s.Deadline > 0 {
		ext["ttft_ms"], ext["tpot_ms"], ext["deadline_ms"] = ms(s.TTFT), ms(s.TPOT), ms(s.Deadline)
	}
	if opts.FailFast {
		ext["fail_fast"] = true
	}
	body["edgeinfer"] = ext
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base.String()+"/v1/completions", bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	h.auth(req)
	tl.Arrived = time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			// 429 (overloaded) or 503 (unavailable): counted as overload,
			// with the server's own words (the client knows no prediction).
			var body struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			_ = json.Unmarshal(msg, &body)
			return 0, &refusal{status: resp.Status, body: strings.TrimSpace(string(msg)),
				oe: &engine.OverloadError{Class: opts.Class.String(), RetryAfter: time.Duration(ra) * time.Second,
					Late: body.Error.Code == "overloaded_in_queue", Alone: body.Error.Code == "slo_unreachable"}}
		}
		return 0, fmt.Errorf("loadgen: %s: %s: %.300s", req.URL, resp.Status, msg)
	}
	tl.Admitted = time.Now() // the server answered: the request is in
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	events, completion := 0, 0
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		line = strings.TrimSpace(line)
		if line == "[DONE]" {
			break
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
				// TokenIDs: edgeinfer serve's answer for a model without
				// a tokenizer (text "", one id per event).
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return completion, fmt.Errorf("loadgen: %s: an event that is not JSON: %.200s", req.URL, line)
		}
		if ev.Error != nil {
			return completion, fmt.Errorf("loadgen: %s: the stream ended with an error: %s", req.URL, ev.Error.Message)
		}
		if ev.Usage != nil {
			tl.PromptTokens, completion = ev.Usage.PromptTokens, ev.Usage.CompletionTokens
		}
		if len(ev.Choices) == 0 || ev.Choices[0].Text == "" && len(ev.Choices[0].TokenIDs) == 0 {
			continue
		}
		at := time.Now()
		tl.Token(at)
		events++
		h.tokens.Add(1)
		if !yield(engine.Token{Text: ev.Choices[0].Text, Index: events - 1, Time: at}, nil) {
			return completion, errStopped
		}
	}
	if err := sc.Err(); err != nil {
		return completion, err
	}
	if completion > events {
		h.tokens.Add(uint64(completion - events))
	}
	return completion, ctx.Err()
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Observe adds an observer of the client-side records, as the engine's
// Observe does.
func (h *HTTPTarget) Observe(o engine.Observer) (remove func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.obs = append(h.obs[:len(h.obs):len(h.obs)], o)
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for i, x := range h.obs {
			if x == o {
				h.obs = append(h.obs[:i:i], h.obs[i+1:]...)
				return
			}
		}
	}
}

// Stats reports what the client sees: requests in flight as running,
// tokens received as decode tokens; the server's queue is unknown (0).
func (h *HTTPTarget) Stats() engine.Stats {
	return engine.Stats{Scheduler: engine.SchedStats{Running: int(h.inflight.Load()), DecodeTokens: h.tokens.Load()}}
}

// Models describes the served model as far as it is known: the
// vocabulary is the prompt words' (or the local tokenizer's).
func (h *HTTPTarget) Models() []engine.ModelInfo {
	vocab := len(promptWords)
	switch {
	case h.ids > 0:
		vocab = h.ids
	case h.tok != nil:
		vocab = h.tok.VocabSize()
	}
	return []engine.ModelInfo{{Name: h.model, Kind: "decoder", Path: h.info.URL, Provider: "unknown (remote server)",
		ORTVersion: "unknown (remote server)", Quantization: "unknown (remote server)", Geometry: &bundle.Geometry{Vocab: vocab}}}
}

// Scheduler is unknown for a remote server: the zero config.
func (h *HTTPTarget) Scheduler() engine.SchedulerConfig { return engine.SchedulerConfig{} }

// Tokenizer is HTTPOptions.Tokenizer.
func (h *HTTPTarget) Tokenizer(string) *tokenizer.Tokenizer { return h.tok }

var _ backend = (*HTTPTarget)(nil)

// promptWords are the synthetic prompts' vocabulary: common English words
// (one or two tokens each in most tokenizers).
var promptWords = strings.Fields(`the of and a to in is was that he it his with as for on at by
i had be not but from this all which or were her they she an one have so their are you we him been
there has when would who them no my more out if some what into up only could then other than its
any time about these now over after very like most upon man sea ship whale boat men old great
little long day night water away still down before good white head round here way yet must many
deep last well such those same said seemed three two first world under see let say came come
go know thought thing things made make own every never through again being might ever while
should while same each because captain whaling sailor harpoon deck mast ocean wind voyage island`)

// Resources scrapes the server's /metrics (at most once a second) for its
// own resident memory, goroutines and KV blocks in use, as edgeinfer serve
// exposes them (process_resident_memory_bytes, go_goroutines,
// edgeinfer_engine_kv_blocks_used); Known is false for servers that do
// not.
func (h *HTTPTarget) Resources() Resources {
	h.resMu.Lock()
	defer h.resMu.Unlock()
	if time.Since(h.resAt) < time.Second {
		return h.res
	}
	h.resAt = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, body, err := h.get(ctx, "/metrics")
	if err != nil || resp.StatusCode != http.StatusOK {
		h.res = Resources{}
		return h.res
	}
	h.res = parseResources(string(body))
	return h.res
}

// parseResources reads the three series from Prometheus text.
func parseResources(text string) Resources {
	var r Resources
	var rss, gor bool
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			r.RSSBytes, rss = int64(v), true
		case "go_goroutines":
			r.Goroutines, gor = int(v), true
		case "edgeinfer_engine_kv_blocks_used":
			r.KVBlocksUsed += int(v)
		}
	}
	r.Known = rss && gor
	return r
}
