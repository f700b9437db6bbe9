package main

// The agent's only contact with the engine's record and stats types: the
// engine pushes each finished request's Record (a metrics.Timeline) to its
// observers; this file turns it into the link's Record.

import (
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/update/link"
)

// observeEngine feeds the engine's finished requests to o. It returns the
// function that removes the observer.
func observeEngine(e *engine.Engine, o link.Observer) (stop func()) {
	return e.Observe(recordObserver{o})
}

// recordObserver adapts a link.Observer to the engine's Observer.
type recordObserver struct{ o link.Observer }

func (r recordObserver) ObserveTimeline(t *engine.Record) { r.o.Observe(recordOf(t)) }

func recordOf(t *engine.Record) link.Record {
	class := t.Class
	if class == "" {
		class = engine.ClassInteractive.String()
	}
	var times []time.Time
	if len(t.Tokens) > 0 {
		times = make([]time.Time, len(t.Tokens))
		for i, d := range t.Tokens {
			times[i] = t.Arrived.Add(d)
		}
	}
	return link.Record{Model: t.Model, Class: class, Outcome: string(t.Outcome),
		Arrived: t.Arrived, FirstScheduled: t.FirstScheduled, FirstToken: t.FirstToken, Finished: t.Finished,
		TokenTimes: times, MetSLO: t.MetSLO()}
}

func engineStats(e *engine.Engine) link.EngineStats {
	st := e.Stats()
	es := link.EngineStats{Preemptions: st.Scheduler.Preemptions}
	for name, kv := range st.KV {
		es.KV = append(es.KV, link.KVStats{Model: name, UsedBytes: kv.BytesUsed, PeakBytes: int64(kv.PeakBlocksUsed) * kv.BlockBytes,
			TotalBytes: kv.BytesTotal, Waste: kv.Waste})
	}
	return es
}
