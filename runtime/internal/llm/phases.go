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
	// ByRows splits Steps and Graph by the steps' decode rows, fewest
	// first, one entry for each count that ran. Graph over Steps mixes
	// batch sizes as the load came and went; a row count's own is what
	// compares with a loop of that many rows (runtime/engine's
	// BenchmarkBatchScaling: eight streams against a bare batch-8 loop)
	// and what one more sequence costs a step.
	ByRows []RowPhases
}

// RowPhases are the decode steps of one row count and their graph time.
type RowPhases struct {
	Rows  int
	Steps uint64
	Graph time.Duration
}

// phaseCounters accumulate DecodePhases; Step runs on the scheduler's
// goroutine while Phases may be read from any.
type phaseCounters struct {
	steps, rows       atomic.Uint64
	graph, kv, sample atomic.Int64 // nanoseconds
	// byRows[r] counts the steps of r rows; sized at Load for the
	// executor's most rows (Options.MaxBatch), which decode refuses to
	// exceed.
	byRows []rowCounters
}

type rowCounters struct {
	steps atomic.Uint64
	graph atomic.Int64 // nanoseconds
}

func (p *phaseCounters) add(rows int, graph, kv, sample time.Duration) {
	p.steps.Add(1)
	p.rows.Add(uint64(rows))
	p.graph.Add(int64(graph))
	p.kv.Add(int64(kv))
	p.sample.Add(int64(sample))
	if rows < len(p.byRows) {
		p.byRows[rows].steps.Add(1)
		p.byRows[rows].graph.Add(int64(graph))
	}
}

// Phases returns the decode steps' time by phase since Load.
func (m *Model) Phases() DecodePhases {
	p := &m.phases
	d := DecodePhases{
		Steps: p.steps.Load(), Rows: p.rows.Load(),
		Graph: time.Duration(p.graph.Load()), KV: time.Duration(p.kv.Load()), Sample: time.Duration(p.sample.Load()),
	}
	for r := range p.byRows {
		if n := p.byRows[r].steps.Load(); n > 0 {
			d.ByRows = append(d.ByRows, RowPhases{Rows: r, Steps: n, Graph: time.Duration(p.byRows[r].graph.Load())})
		}
	}
	return d
}
