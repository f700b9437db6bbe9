package sched

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A refusal on a busy device names the limit it was over: a message that
// said "predicted TTFT 74ms exceeds the SLO 100ms" read as a bug to the
// person who got it.
func TestOverloadErrorNamesItsLimit(t *testing.T) {
	busy := &OverloadError{Class: "interactive", Predicted: 74 * time.Millisecond, SLO: 100 * time.Millisecond,
		Limit: 70 * time.Millisecond, RetryAfter: 4 * time.Millisecond}
	msg := busy.Error()
	for _, want := range []string{"74ms", "exceeds 70ms", "SLO 100ms", "busy device", "retry after 4ms"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	whole := &OverloadError{Class: "interactive", Predicted: 120 * time.Millisecond, SLO: 100 * time.Millisecond,
		Limit: 100 * time.Millisecond, RetryAfter: 20 * time.Millisecond}
	if msg := whole.Error(); !strings.Contains(msg, "exceeds the interactive SLO 100ms") || strings.Contains(msg, "share") {
		t.Errorf("a limit equal to the objective: %q", msg)
	}
	if !errors.Is(busy, ErrOverloaded) {
		t.Error("not ErrOverloaded")
	}
}

// The scheduler fills the limit in: a refusal on a busy device carries the
// share of the objective it was held to.
func TestBusyRefusalCarriesLimit(t *testing.T) {
	var s Scheduler[any]
	s.cfg.QueueLimit = 8
	p := prediction{Own: 10 * time.Millisecond, Wait: 70 * time.Millisecond}
	_, err := s.refuseLocked(ClassInteractive, 100*time.Millisecond, true, p, time.Now())
	var oe *OverloadError
	if !errors.As(err, &oe) {
		t.Fatalf("not refused: %v", err)
	}
	if want := time.Duration(ttftHeadroom * float64(100*time.Millisecond)); oe.Limit != want {
		t.Errorf("limit %v, want %v", oe.Limit, want)
	}
}
