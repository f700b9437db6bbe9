package device

import (
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// What the link's telemetry needs from a serving engine: its records and
// its counters.

// Records adapts a link.Observer (the link's Telemetry) to the engine's
// observers: e.Observe(serving.Records(tel)).
func Records(o link.Observer) engine.Observer { return recordObserver{o} }

type recordObserver struct{ o link.Observer }

func (r recordObserver) ObserveTimeline(t *engine.Record) {
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
	r.o.Observe(link.Record{Model: t.Model, Class: class, Outcome: string(t.Outcome),
		Arrived: t.Arrived, FirstScheduled: t.FirstScheduled, FirstToken: t.FirstToken, Finished: t.Finished,
		TokenTimes: times, MetSLO: t.MetSLO()})
}

// EngineStats is the telemetry's view of the engine's counters.
func EngineStats(e *engine.Engine) link.EngineStats {
	st := e.Stats()
	es := link.EngineStats{Preemptions: st.Scheduler.Preemptions}
	for name, kv := range st.KV {
		es.KV = append(es.KV, link.KVStats{Model: name, UsedBytes: kv.BytesUsed, PeakBytes: int64(kv.PeakBlocksUsed) * kv.BlockBytes,
			TotalBytes: kv.BytesTotal, Waste: kv.Waste})
	}
	return es
}
