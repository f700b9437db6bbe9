package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// apiError is an error in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}. Message says what to
// change.
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	// RetryAfter, when positive, is sent as the Retry-After header.
	RetryAfter time.Duration `json:"-"`
}

func (e *apiError) Error() string { return e.Message }

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// badRequest is a 400 naming the parameter at fault.
func badRequest(param, format string, args ...any) *apiError {
	msg := fmt.Sprintf(format, args...)
	if param != "" {
		msg = param + ": " + msg
	}
	return &apiError{Status: http.StatusBadRequest, Message: msg, Type: "invalid_request_error", Param: strp(param)}
}

func withCode(e *apiError, code string) *apiError { e.Code = strp(code); return e }

// errorOf maps an engine error to the API's. An overload is 429 with
// Retry-After and a code that says which refusal it was: "overloaded"
// (refused at arrival: the queue ahead, or a full queue),
// "overloaded_in_queue" (a fail-fast request queued on a prediction that
// it would fit, refused once it could not), "slo_unreachable" (the
// request alone on an idle device is predicted over its objective).
func errorOf(err error) *apiError {
	var ae *apiError
	var oe *engine.OverloadError
	var be *engine.BudgetError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &be):
		return budgetError(be) // resident.go
	case errors.As(err, &oe):
		code := "overloaded"
		switch {
		case oe.Late:
			code = "overloaded_in_queue"
		case oe.Alone:
			code = "slo_unreachable"
		}
		return &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: strp(code), RetryAfter: oe.RetryAfter,
			Message: fmt.Sprintf("the engine is overloaded (%s): retry after %s, lower the request's priority class or relax its SLO", err, retryAfter(oe.RetryAfter))}
	case errors.Is(err, engine.ErrUnknownModel):
		return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: strp("model"), Code: strp("model_not_found"), Message: err.Error()}
	case errors.Is(err, engine.ErrInvalidRequest), errors.Is(err, engine.ErrPromptTooLong), errors.Is(err, engine.ErrNoTokenizer):
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()}
	}
	return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()}
}

// retryAfter is the Retry-After value: whole seconds, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfter(e.RetryAfter))
	}
	writeJSON(w, e.Status, map[string]*apiError{"error": e})
}
