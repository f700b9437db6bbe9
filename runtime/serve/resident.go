package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// Models resident under the engine's memory budget, as the API shows
// them: a request for a model not loaded loads it (the engine's Hold), its
// edgeinfer.keep_alive says how long it stays after, /v1/models lists what
// is loaded and what could be, and a model too big for the budget is a
// 507 naming it.

// maxKeepAlive bounds a keep_alive in seconds so that it converts to a
// time.Duration without overflow (about 292 years); longer is "for good".
const maxKeepAlive = float64(math.MaxInt64 / int64(time.Second))

// parseKeepAlive reads edgeinfer.keep_alive as Ollama's keep_alive: a
// duration string ("30s", "5m", "1h30m"), or a number of seconds (as a
// JSON number or a string of one). 0 unloads the model once its last
// request ends; a negative value keeps it loaded until the memory budget
// needs its room. Absent or null: nil, the engine's default.
func parseKeepAlive(raw json.RawMessage) (*time.Duration, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return nil, nil
	}
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, keepAliveError(s)
		}
		s = strings.TrimSpace(s)
		if d, err := time.ParseDuration(s); err == nil {
			return keep(d), nil
		}
	}
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
		return nil, keepAliveError(s)
	}
	if secs < 0 {
		return keep(-1), nil
	}
	if secs > maxKeepAlive {
		return nil, keepAliveError(s)
	}
	return keep(time.Duration(secs * float64(time.Second))), nil
}

// keep normalises a keep-alive: every negative value means "for good".
func keep(d time.Duration) *time.Duration {
	if d < 0 {
		d = -1
	}
	return &d
}

func keepAliveError(s string) error {
	return badRequest("edgeinfer.keep_alive", "%q: want a duration (\"30s\", \"5m\"), a number of seconds, 0 to unload the model after the request or a negative value to keep it loaded", s)
}

// hold makes the named model resident for the request (loading it when
// it is not) and checks its kind when kind is set. The caller calls
// release when the request is over, before it writes the answer's last
// bytes: a client that has its answer and lists the models sees this one
// idle, with its keep-alive's expiry (TestKeepAliveField). release may be
// called again (a deferred call on every other path). loadTime is the
// load it waited for, sent back as the X-Edgeinfer-Load-Ms header.
func (s *Server) hold(ctx context.Context, w *responseWriter, name, kind string, keep *time.Duration) (*engine.ModelInfo, func(), *apiError) {
	m, loadTime, held, err := s.e.Hold(ctx, name, keep)
	if err != nil {
		if errors.Is(err, engine.ErrUnknownModel) {
			return nil, nil, s.notServed(ctx, name)
		}
		return nil, nil, errorOf(err)
	}
	release := sync.OnceFunc(held)
	if kind != "" && m.Kind != kind {
		release()
		return nil, nil, withCode(badRequest("model", "%q is a %s model: use %s", name, m.Kind, map[string]string{
			"decoder": "/v1/chat/completions or /v1/completions", "oneshot": "POST /v1/infer/" + name}[m.Kind]), "model_kind")
	}
	if loadTime > 0 {
		w.Header().Set("X-Edgeinfer-Load-Ms", strconv.FormatFloat(float64(loadTime)/float64(time.Millisecond), 'f', 1, 64))
	}
	return &m, release, nil
}

// notServed is the 404 of a model the engine neither has nor can load.
func (s *Server) notServed(ctx context.Context, name string) *apiError {
	var names []string
	for _, m := range s.available(ctx) {
		names = append(names, m.Name)
	}
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: strp("model"), Code: strp("model_not_found"),
		Message: fmt.Sprintf("model %q is not served here: use one of %s", name, strings.Join(names, ", "))}
}

// available is what the engine has loaded and could load; a store it
// cannot read is logged and its models left out.
func (s *Server) available(ctx context.Context) []engine.Available {
	list, err := s.e.Available(ctx)
	if err != nil {
		s.log.Warn("serve: listing the models", "err", err)
	}
	return list
}

// budgetError is the 507 of a model that does not fit the memory budget
// even with every idle model unloaded: retrying does not help, a bigger
// budget or a smaller model does.
func budgetError(be *engine.BudgetError) *apiError {
	return &apiError{Status: http.StatusInsufficientStorage, Type: "server_error", Param: strp("model"), Code: strp("model_too_large"),
		Message: fmt.Sprintf("model %s needs %.1f MiB (its files and KV budget), over the server's memory budget of %.1f MiB (%.1f MiB held by models loaded for good): raise serve --memory-budget or lower --kv-budget",
			be.Model, mibOf(be.Bytes), mibOf(be.Budget), mibOf(be.Held))}
}

func mibOf(b int64) float64 { return float64(b) / (1 << 20) }
