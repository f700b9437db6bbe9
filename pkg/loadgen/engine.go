package loadgen

import (
	"context"
	"iter"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// Engine is what the harness needs of an engine; *engine.Engine implements
// it. The harness runs in-process, so what it measures is the SDK's own
// timeline, stamped on the device loop.
type Engine interface {
	GenerateTokens(ctx context.Context, model string, prompt []int32, opts engine.GenerateOptions) iter.Seq2[engine.Token, error]
	Records() []sched.Timeline
	Stats() engine.Stats
	Models() []engine.ModelInfo
	SchedConfig() sched.Config
	Tokenizer(model string) *tokenizer.Tokenizer
}

var _ Engine = (*engine.Engine)(nil)

// toMetrics converts the scheduler's record of a request into the metrics
// package's timeline (token times become offsets from arrival).
func toMetrics(t sched.Timeline) *metrics.Timeline {
	class := t.Class
	if class == sched.ClassUnset {
		class = sched.ClassInteractive
	}
	m := metrics.NewTimeline(t.ID, class.String(), t.Arrived, len(t.TokenTimes))
	m.Admitted = t.Admitted
	m.FirstScheduled = t.FirstScheduled
	for _, at := range t.TokenTimes {
		m.Token(at)
	}
	m.Preempted = t.Preemptions
	m.PromptTokens = t.PromptTokens
	m.SLO = metrics.SLO{TTFT: t.SLO.TTFT, TPOT: t.SLO.TPOT, E2E: t.SLO.Deadline}
	m.Finish(t.Finished, outcomeOf(t.Outcome))
	return m
}

func outcomeOf(o sched.Outcome) metrics.Outcome {
	switch o {
	case sched.OutcomeCompleted:
		return metrics.Completed
	case sched.OutcomeCancelled:
		return metrics.Cancelled
	case sched.OutcomeRejected:
		return metrics.Rejected
	case sched.OutcomeTimedOut:
		return metrics.TimedOut
	}
	return metrics.Failed
}

func classOf(s string) sched.Class {
	switch s {
	case "batch":
		return sched.ClassBatch
	case "realtime":
		return sched.ClassRealtime
	}
	return sched.ClassInteractive
}
