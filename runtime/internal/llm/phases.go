package llm

import (
	"sync/atomic"
	"time"
)

// DecodePhases is where a decoder's decode steps spent their time since
// Load, summed: the graph's run (Graph), the block tables and the scatter
// of the step's keys and values into their slots (KV; where the graph
// writes them itself, the tables alone: the writes are in Graph), and
// sampling the rows and appending their tokens (Sample). Steps counts the
// decode steps and Rows their rows; a step with prompt chunks beside its
// decode rows counts only its decode part. With the compatible contract
// Graph holds the gather of the past and the scatter too (they are one
// call there). What a step costs outside the graph is KV + Sample over
// Steps; the scheduler's own share is its LoopTime − ExecTime.
type DecodePhases struct {
	Steps, Rows       uint64
	Graph, KV, Sample time.Duration
}

// phaseCounters accumulate DecodePhases; Step runs on the scheduler's
// goroutine while Phases may be read from any.
type phaseCounters struct {
	steps, rows       atomic.Uint64
	graph, kv, sample atomic.Int64 // nanoseconds
}

func (p *phaseCounters) add(rows int, graph, kv, sample time.Duration) {
	p.steps.Add(1)
	p.rows.Add(uint64(rows))
	p.graph.Add(int64(graph))
	p.kv.Add(int64(kv))
	p.sample.Add(int64(sample))
}

// Phases returns the decode steps' time by phase since Load.
func (m *Model) Phases() DecodePhases {
	p := &m.phases
	return DecodePhases{
		Steps: p.steps.Load(), Rows: p.rows.Load(),
		Graph: time.Duration(p.graph.Load()), KV: time.Duration(p.kv.Load()), Sample: time.Duration(p.sample.Load()),
	}
}
