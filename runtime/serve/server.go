package serve

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server is the HTTP API over a Backend. It is safe for concurrent use.
type Server struct {
	cfg     Config
	b       Backend
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

// New returns a server for b. logger nil discards logs.
func New(b Backend, cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg.withDefaults(), b: b, log: logger, mux: http.NewServeMux()}
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	var err error
	if s.metrics, err = newServerMetrics(b); err != nil {
		return nil, err
	}
	s.removeObs = b.Observe(s.metrics.timeline)
	s.route("GET /health", s.health)
	s.route("GET /ready", s.ready)
	s.route("GET /metrics", s.metrics.serveHTTP)
	s.route("GET /version", s.version)
	s.route("GET /v1/models", s.listModels)
	s.route("GET /v1/models/{model}", s.getModel)
	s.route("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.text(w, r, true) })
	s.route("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.text(w, r, false) })
	s.route("POST /v1/infer/{model}", s.infer)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: strp("unknown_url"),
			Message: fmt.Sprintf("no route %s %s: this server serves /v1/chat/completions, /v1/completions, /v1/models, /v1/infer/<model>, /health, /ready, /metrics", r.Method, r.URL.Path)})
	})
	return s, nil
}

// route registers h under pattern behind the bearer-token check (but for
// the probes) and the request counter.
func (s *Server) route(pattern string, h http.HandlerFunc) {
	path := pattern[strings.IndexByte(pattern, ' ')+1:]
	open := path == "/health" || path == "/ready"
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
		cw.Header().Set("Server", "edgeinfer/"+sdkVersion())
		defer func() { s.metrics.request(path, cw.status) }()
		if !open && !s.authorized(r) {
			cw.Header().Set("WWW-Authenticate", `Bearer realm="edgeinfer"`)
			writeError(cw, &apiError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: strp("invalid_api_key"),
				Message: "missing or wrong bearer token: send Authorization: Bearer <the token serve was started with>"})
			return
		}
		h(cw, r)
	}))
}

func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1
}

// countingWriter remembers the status for the metrics and passes
// flushes through (SSE needs them).
type countingWriter struct {
	http.ResponseWriter
	status int
}

func (w *countingWriter) WriteHeader(code int)        { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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

// Close stops observing the backend and cancels running requests. It is
// idempotent; Serve calls it.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.draining.Store(true)
		s.cancelBase()
		s.removeObs()
	})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	}
	if len(s.b.Models()) == 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "no models"})
		return
	}
	st := s.b.Stats()
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "queued": st.Queued, "running": st.Running})
}

// modelObject is OpenAI's model object, with the context length and kind
// as extensions.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Kind    string `json:"kind"`
	Context int    `json:"context_length,omitempty"`
	Chat    bool   `json:"chat_template"`
}

func objectOf(m Model) modelObject {
	return modelObject{ID: m.Name, Object: "model", Created: m.Created.Unix(), OwnedBy: "edgeinfer", Kind: m.Kind, Context: m.Context, Chat: m.Chat != nil}
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	data := []modelObject{}
	for _, m := range s.b.Models() {
		data = append(data, objectOf(m))
	}
	sort.Slice(data, func(i, j int) bool { return data[i].ID < data[j].ID })
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	m, err := s.findModel(r.PathValue("model"), "")
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, objectOf(*m))
}

// findModel returns the named model, checking its kind when kind is set.
func (s *Server) findModel(name, kind string) (*Model, *apiError) {
	var names []string
	for _, m := range s.b.Models() {
		if m.Name == name {
			if kind != "" && m.Kind != kind {
				return nil, withCode(badRequest("model", "%q is a %s model: use %s", name, m.Kind, map[string]string{
					"decoder": "/v1/chat/completions or /v1/completions", "oneshot": "POST /v1/infer/" + name}[m.Kind]), "model_kind")
			}
			return &m, nil
		}
		names = append(names, m.Name)
	}
	sort.Strings(names)
	return nil, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: strp("model"), Code: strp("model_not_found"),
		Message: fmt.Sprintf("model %q is not served here: use one of %s", name, strings.Join(names, ", "))}
}

// version serves GET /version: the server's build and each model's, for
// benchmark reports (bench --target records it).
func (s *Server) version(w http.ResponseWriter, r *http.Request) {
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
	for _, m := range s.b.Models() {
		ms = append(ms, model{m.Name, m.Kind, m.Version, m.Quantization, m.Provider, m.Runtime, m.Context})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
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
