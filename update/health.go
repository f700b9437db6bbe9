package update

import (
	"context"
	"fmt"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// Generator runs the golden request of a health check: greedy decoding of
// prompt (or promptTokens when prompt is "") for maxTokens tokens on the
// model loaded under name. The engine implements it (see engine.go).
type Generator interface {
	GenerateGreedy(ctx context.Context, name, prompt string, promptTokens []int32, maxTokens int) ([]int32, error)
}

// Check is what an Activator runs against the new version, loaded beside
// the running one under the name staged, before it switches.
type Check func(ctx context.Context, g Generator, staged string) error

// Activator switches the running engine to a new version. The engine's
// run-time swap implements it: the new version is loaded beside the old,
// check runs against it, then new requests go to it atomically while
// running ones finish on the old; on any error the old one keeps serving.
// A nil check switches without one (a manual rollback).
type Activator interface {
	Swap(ctx context.Context, ref store.Ref, check Check) error
}

// HealthReport holds what a health check measured.
type HealthReport struct {
	Passed       bool    `json:"passed"`
	Matched      int     `json:"matched"`  // tokens equal to the expected ones, position by position
	Expected     int     `json:"expected"` // expected tokens
	MinMatch     int     `json:"min_match_percent"`
	LatencyMS    float64 `json:"latency_ms"`
	MaxLatencyMS int64   `json:"max_latency_ms,omitempty"`
	Output       []int32 `json:"output,omitempty"`
	Reason       string  `json:"reason,omitempty"`
}

// RunHealth runs h against the model named staged and judges it: the
// output must match ExpectTokens in at least MinMatch of the positions and
// the request must finish within MaxLatencyMS. The report is filled in
// either way; a failed check is an ErrHealth error carrying the reason.
func RunHealth(ctx context.Context, g Generator, staged string, h *bundle.Health, now func() time.Time) (HealthReport, error) {
	if now == nil {
		now = time.Now
	}
	rep := HealthReport{Expected: len(h.ExpectTokens), MinMatch: h.MinMatchPercent, MaxLatencyMS: h.MaxLatencyMS}
	if rep.MinMatch == 0 {
		rep.MinMatch = 100
	}
	start := now()
	out, err := g.GenerateGreedy(ctx, staged, h.Prompt, h.PromptTokens, len(h.ExpectTokens))
	rep.LatencyMS = float64(now().Sub(start).Microseconds()) / 1000
	rep.Output = out
	if err != nil {
		rep.Reason = "golden request failed: " + err.Error()
		return rep, fmt.Errorf("%w: %s", ErrHealth, rep.Reason)
	}
	for i, id := range h.ExpectTokens {
		if i < len(out) && out[i] == id {
			rep.Matched++
		}
	}
	switch {
	case 100*rep.Matched < rep.MinMatch*rep.Expected:
		rep.Reason = fmt.Sprintf("golden output matched %d of %d tokens (%d%% required)", rep.Matched, rep.Expected, rep.MinMatch)
	case h.MaxLatencyMS > 0 && rep.LatencyMS > float64(h.MaxLatencyMS):
		rep.Reason = fmt.Sprintf("golden request took %.1f ms, the bound is %d ms", rep.LatencyMS, h.MaxLatencyMS)
	default:
		rep.Passed = true
		return rep, nil
	}
	return rep, fmt.Errorf("%w: %s", ErrHealth, rep.Reason)
}
