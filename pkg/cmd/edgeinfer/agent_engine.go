package main

// The agent's only contact with the engine's record and stats types. The
// engine is gaining push observers (engine.Config.Observers, e.Observe)
// and its own Record type; when they land, observeEngine becomes
// e.Observe(observer{tel}) and recordOf takes an engine.Record — nothing
// else in the agent changes.

import (
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/sched"
	"github.com/edgeinfer/edgeinfer/update/link"
)

// observeEngine feeds the engine's finished requests to o: the engine
// today hands them out by draining (e.Records), polled every 100 ms. It
// returns the function that stops and joins the poller.
func observeEngine(e *engine.Engine, o link.Observer) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-done:
				return
			}
			for _, r := range e.Records() {
				o.Observe(recordOf(&r))
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

func recordOf(t *sched.Timeline) link.Record {
	class := t.Class.String()
	if t.Class == sched.ClassUnset {
		class = sched.ClassInteractive.String()
	}
	return link.Record{Model: t.Model, Class: class, Outcome: t.Outcome.String(),
		Arrived: t.Arrived, FirstScheduled: t.FirstScheduled, FirstToken: t.FirstToken, Finished: t.Finished,
		TokenTimes: t.TokenTimes, MetSLO: t.MetSLO()}
}

func engineStats(e *engine.Engine) link.EngineStats {
	st := e.Stats()
	es := link.EngineStats{Preemptions: st.Sched.Preemptions}
	for name, kv := range st.KV {
		es.KV = append(es.KV, link.KVStats{Model: name, UsedBytes: kv.BytesUsed, PeakBytes: int64(kv.PeakBlocksUsed) * kv.BlockBytes,
			TotalBytes: kv.BytesTotal, Waste: kv.Waste})
	}
	return es
}
