package engine

import (
	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
)

// Record is the timeline of one finished request — every request, refused,
// cancelled and failed ones included: arrival, admission, first scheduled,
// each token, finish, outcome, finish reason, model and class. It is
// pkg/metrics' Timeline, so the metrics package, its Prometheus collector
// and the cloud link's telemetry consume records with no conversion.
type Record = metrics.Timeline

// Observer is told of every finished request (ObserveTimeline). The
// Prometheus collector (pkg/metrics/prom), a metrics.Recorder and the cloud
// link's telemetry are observers. An observer that also implements
// metrics.MemoryObserver gets each decoder's memory gauges after every
// batch of records.
//
// Observers run on one goroutine of the engine's, never on the device
// loop, so a slow observer cannot slow inference; one that falls more than
// SchedulerConfig.MaxRecords behind loses the oldest records, counted in
// SchedStats.RecordsDropped, so memory stays bounded in a process that runs
// for months. A record is shared between observers and never written again:
// keep it if you like, do not modify it.
type Observer = metrics.Observer

type observerEntry struct{ o Observer }

// Observe adds an observer while the engine runs; the returned function
// removes it.
func (e *Engine) Observe(o Observer) (remove func()) {
	ent := &observerEntry{o: o}
	e.mu.Lock()
	e.mu.observers = append(e.mu.observers, ent)
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for i, x := range e.mu.observers {
			if x == ent {
				e.mu.observers = append(e.mu.observers[:i:i], e.mu.observers[i+1:]...)
				return
			}
		}
	}
}

// pumpRecords passes the scheduler's records to the observers as they
// finish, until the engine closes (after a last drain).
func (e *Engine) pumpRecords() {
	for {
		select {
		case <-e.s.Recorded():
			e.deliver()
		case <-e.plugins.woken(): // plugins.go
			e.deliver()
		case <-e.life.Done():
			e.deliver()
			return
		}
	}
}

func (e *Engine) deliver() {
	defer e.flushPending()
	recs := e.holdPluginRecords(e.s.Records())
	if len(recs) == 0 {
		return
	}
	e.mu.RLock()
	obs := e.mu.observers
	var mems []func(metrics.MemoryObserver)
	for name, m := range e.mu.models {
		if m.dec != nil {
			mem := m.memory()
			mems = append(mems, func(o metrics.MemoryObserver) { o.ObserveMemory(name, mem) })
		}
	}
	e.mu.RUnlock()
	if len(obs) == 0 {
		return
	}
	for i := range recs {
		r := recordOf(&recs[i])
		for _, o := range obs {
			o.o.ObserveTimeline(r)
		}
	}
	for _, o := range obs {
		if mo, ok := o.o.(metrics.MemoryObserver); ok {
			for _, f := range mems {
				f(mo)
			}
		}
	}
}

var outcomes = [...]metrics.Outcome{
	sched.OutcomeCompleted: metrics.Completed, sched.OutcomeCancelled: metrics.Cancelled,
	sched.OutcomeRejected: metrics.Rejected, sched.OutcomeTimedOut: metrics.TimedOut,
	sched.OutcomeFailed: metrics.Failed,
}

// recordOf is the one conversion of the scheduler's timeline to a Record.
func recordOf(t *sched.Timeline) *Record {
	r := metrics.NewTimeline(t.ID, classOf(t.Class).String(), t.Arrived, len(t.TokenTimes))
	r.Model, r.Kind = publicName(t.Model), t.Kind.String()
	r.Admitted, r.FirstScheduled, r.FirstToken, r.Finished = t.Admitted, t.FirstScheduled, t.FirstToken, t.Finished
	for _, at := range t.TokenTimes {
		r.Tokens = append(r.Tokens, at.Sub(t.Arrived))
	}
	r.OutputTokens = len(t.TokenTimes)
	if int(t.Outcome) < len(outcomes) {
		r.Outcome = outcomes[t.Outcome]
	}
	if t.Kind == sched.KindGenerate {
		r.FinishReason = t.Finish.String()
	}
	r.Err, r.Preempted = t.Err, t.Preemptions
	r.PromptTokens, r.CachedTokens, r.BatchSize = t.PromptTokens, t.CachedTokens, t.BatchSize
	r.SLO = metrics.SLO{TTFT: t.SLO.TTFT, TPOT: t.SLO.TPOT, E2E: t.SLO.Deadline}
	r.FailFast, r.RefusedInQueue = t.FailFast, t.RefusedInQueue
	r.LoadTime = t.LoadTime
	return r
}
