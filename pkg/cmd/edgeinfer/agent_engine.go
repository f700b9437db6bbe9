package main

// The agent's only contact with the engine's record and stats types:
// finished requests arrive as engine records (metrics timelines) through
// an engine observer and become link.Records; the stats become
// link.EngineStats.

import (
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/update/link"
)

// observeEngine feeds every finished request of e to o; the returned
// function stops it. The engine calls observers on a goroutine of its own,
// off the device loop, and Telemetry.Observe only records into
// histograms: it never waits on the network.
func observeEngine(e *engine.Engine, o link.Observer) (stop func()) {
	return e.Observe(timelineObserver{o})
}

type timelineObserver struct{ o link.Observer }

func (t timelineObserver) ObserveTimeline(tl *engine.Record) { t.o.Observe(recordOf(tl)) }

func recordOf(t *metrics.Timeline) link.Record {
	class := t.Class
	if class == "" {
		class = metrics.ClassInteractive
	}
	times := make([]time.Time, len(t.Tokens))
	for i, d := range t.Tokens {
		times[i] = t.Arrived.Add(d)
	}
	return link.Record{Model: t.Model, Class: class, Outcome: string(t.Outcome), Arrived: t.Arrived,
		FirstScheduled: t.FirstScheduled, FirstToken: t.FirstToken, Finished: t.Finished,
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
