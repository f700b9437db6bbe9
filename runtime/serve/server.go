package serve

import (
	"cmp"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// Server is the HTTP API over an engine. It is safe for concurrent use.
type Server struct {
	cfg     Config
	e       *engine.Engine
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *serverMetrics
	// draining is set once Shutdown began: /ready answers 503 and new
	// generations are refused, running streams go on.
	draining atomic.Bool
	// baseCtx is every request's parent: cancelled when the drain time is
	// over, it ends the streams still running.
	baseCtx    context.Context
	cancelBase context.CancelFunc
	removeObs  func()
	closeOnce  sync.Once
}

// New returns a server for e's models: the ones open at each request, so a
// model loaded, unloaded or swapped while it serves is served as it is
// then. The engine stays its owner's to close, after the server. logger
// nil discards logs; an enabled logger gets a line per request at Info.
func New(e *engine.Engine, cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TLSCertFile != "" {
		// A bad pair is refused here, where the caller can say so, not
		// when Serve starts in the background.
		if _, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("%w: tls_cert_file/tls_key_file: %w", ErrConfig, err)
		}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg.withDefaults(), e: e, log: logger, mux: http.NewServeMux()}
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	var err error
	if s.metrics, err = newServerMetrics(e); err != nil {
		return nil, err
	}
	s.removeObs = e.Observe(s.metrics.timeline)
	s.route("GET /health", s.health)
	s.route("GET /ready", s.ready)
	s.route("GET /metrics", func(w *responseWriter, r *http.Request) { s.metrics.handler.ServeHTTP(w, r) })
	s.route("GET /version", s.version)
	s.route("GET /v1/models", s.listModels)
	s.route("GET /v1/models/{model}", s.getModel)
	s.route("POST /v1/chat/completions", func(w *responseWriter, r *http.Request) { s.text(w, r, true) })
	s.route("POST /v1/completions", func(w *responseWriter, r *http.Request) { s.text(w, r, false) })
	s.route("POST /v1/infer/{model}", s.infer)
	s.route("POST /v1/embeddings", s.embeddings)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: strp("unknown_url"),
			Message: fmt.Sprintf("no route %s %s: this server serves /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /v1/infer/<model>, /health, /ready, /metrics", r.Method, r.URL.Path)})
	})
	return s, nil
}

// route registers h under pattern behind the bearer-token check (but for
// the probes), the request counter and the request log.
func (s *Server) route(pattern string, h func(*responseWriter, *http.Request)) {
	path := pattern[strings.IndexByte(pattern, ' ')+1:]
	open := path == "/health" || path == "/ready"
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &responseWriter{ResponseWriter: w, status: http.StatusOK}
		rw.Header().Set("Server", "edgeinfer/"+sdkVersion())
		defer func() {
			s.metrics.request(path, rw.status)
			s.logRequest(r, rw, time.Since(start))
		}()
		if !open && !s.authorized(r) {
			rw.Header().Set("WWW-Authenticate", `Bearer realm="edgeinfer"`)
			writeError(rw, &apiError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: strp("invalid_api_key"),
				Message: "missing or wrong bearer token: send Authorization: Bearer <the token serve was started with>"})
			return
		}
		h(rw, r)
	}))
}

// logRequest writes the request's line (at Info, when the logger takes
// it): method, path, status, model, duration and, for a generation, its
// prompt tokens (and those the prefix cache held), output tokens and TTFT.
func (s *Server) logRequest(r *http.Request, w *responseWriter, d time.Duration) {
	if !s.log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", w.status)}
	if w.model != "" {
		attrs = append(attrs, slog.String("model", w.model))
	}
	attrs = append(attrs, slog.Duration("duration", d))
	if w.generated {
		attrs = append(attrs, slog.Int("prompt_tokens", w.promptTokens), slog.Int("cached_tokens", w.cached), slog.Int("tokens", w.tokens))
		if w.ttft > 0 {
			attrs = append(attrs, slog.Duration("ttft", w.ttft))
		}
	}
	s.log.LogAttrs(context.WithoutCancel(r.Context()), slog.LevelInfo, "request", attrs...)
}

func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1
}

// responseWriter remembers what the metrics and the request log say of a
// request (its status; the model and tokens, set by the handlers) and
// passes flushes through (SSE needs them).
type responseWriter struct {
	http.ResponseWriter
	status int
	model  string
	// generated: a generation ran; promptTokens, cached and tokens are its
	// counts, ttft its time to the first token (0: none came).
	generated                    bool
	promptTokens, cached, tokens int
	ttft                         time.Duration
}

func (w *responseWriter) WriteHeader(code int)        { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Addr is the configured listen address, defaults applied.
func (s *Server) Addr() string { return s.cfg.Addr }

// Handler is the API as an http.Handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.mux }

// Serve answers on ln until ctx ends, then shuts down gracefully: /ready
// turns 503, new generations are refused, running streams get
// DrainTimeout to finish before they are cancelled. It returns nil after
// a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return s.baseCtx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() {
		if s.cfg.TLSCertFile != "" {
			errc <- srv.ServeTLS(ln, s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		s.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("serve: draining", "timeout", s.cfg.DrainTimeout)
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	err := srv.Shutdown(dctx)
	if err != nil {
		// Drain time is over: cancel the streams still running, then
		// close their connections.
		s.cancelBase()
		err = errors.Join(fmt.Errorf("serve: drain: %w", err), srv.Close())
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	s.Close()
	return err
}

// ListenAndServe listens on Config.Addr and calls Serve.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Close stops observing the engine and cancels running requests. It is
// idempotent; Serve calls it.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.draining.Store(true)
		s.cancelBase()
		s.removeObs()
	})
}

func (s *Server) health(w *responseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) ready(w *responseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	}
	if len(s.e.Models()) == 0 && len(s.available(r.Context())) == 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "no models"})
		return
	}
	st := s.e.Stats().Scheduler
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "queued": queued(st), "running": st.Running})
}

// queued is the generation requests waiting, all classes.
func queued(st engine.SchedStats) int {
	n := 0
	for _, q := range st.Queued {
		n += q
	}
	return n
}

// modelObject is OpenAI's model object, with the context length and kind
// as extensions, and the model's residency: loaded or not (a request
// loads it), what it counts against the memory budget, and when its
// keep-alive ends if no request comes. A model not loaded has no context
// length or template to tell yet; its created is its load time when
// loaded, else 0.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Kind    string `json:"kind"`
	Version string `json:"version,omitempty"`
	Context int    `json:"context_length,omitempty"`
	Chat    bool   `json:"chat_template"`
	Loaded  bool   `json:"loaded"`
	Bytes   int64  `json:"memory_bytes,omitempty"`
	// ExpiresAt is the Unix time its keep-alive ends; omitted when it is
	// not loaded, busy or kept for good.
	ExpiresAt int64 `json:"expires_at,omitempty"`
}

func objectOf(a engine.Available) modelObject {
	o := modelObject{ID: a.Name, Object: "model", OwnedBy: "edgeinfer", Kind: a.Kind, Version: a.Version, Loaded: a.Loaded, Bytes: a.Bytes}
	if m := a.Info; m != nil {
		o.Created, o.Context, o.Chat = m.Loaded.Unix(), m.Context, m.ChatTemplate
	}
	if !a.Expires.IsZero() {
		o.ExpiresAt = a.Expires.Unix()
	}
	return o
}

// models are the engine's open models now, by name.
func (s *Server) models() []engine.ModelInfo {
	ms := s.e.Models()
	slices.SortFunc(ms, func(a, b engine.ModelInfo) int { return cmp.Compare(a.Name, b.Name) })
	return ms
}

func (s *Server) listModels(w *responseWriter, r *http.Request) {
	data := []modelObject{}
	for _, a := range s.available(r.Context()) {
		data = append(data, objectOf(a))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// getModel describes one model without loading it.
func (s *Server) getModel(w *responseWriter, r *http.Request) {
	name := r.PathValue("model")
	for _, a := range s.available(r.Context()) {
		if a.Name == name {
			writeJSON(w, http.StatusOK, objectOf(a))
			return
		}
	}
	writeError(w, s.notServed(r.Context(), name))
}

// version serves GET /version: the server's build and each model's, for
// benchmark reports (bench --target records it).
func (s *Server) version(w *responseWriter, r *http.Request) {
	type model struct {
		ID           string `json:"id"`
		Kind         string `json:"kind"`
		Version      string `json:"version,omitempty"`
		Quantization string `json:"quantization,omitempty"`
		Provider     string `json:"provider,omitempty"`
		Runtime      string `json:"runtime,omitempty"`
		Context      int    `json:"context_length,omitempty"`
	}
	ms := []model{}
	for _, m := range s.models() {
		ms = append(ms, model{m.Name, m.Kind, m.Version, m.Quantization, m.Provider, "onnxruntime " + m.ORTVersion, m.Context})
	}
	writeJSON(w, http.StatusOK, map[string]any{"server": "edgeinfer", "version": sdkVersion(), "go": runtime.Version(),
		"os": runtime.GOOS, "arch": runtime.GOARCH, "models": ms})
}

// sdkVersion is the module version (or VCS revision) of this build.
func sdkVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, d := range bi.Deps {
		if d.Path == "github.com/edgeinfer/edgeinfer" {
			v = d.Version
		}
	}
	for _, st := range bi.Settings {
		if st.Key == "vcs.revision" && (v == "" || v == "(devel)") {
			v = "devel-" + st.Value[:min(12, len(st.Value))]
		}
	}
	if v == "" {
		v = "unknown"
	}
	return v
}

// now is the clock for "created" fields.
var now = time.Now
