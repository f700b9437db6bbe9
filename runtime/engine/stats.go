package engine

import (
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/internal/llm"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
)

// Stats is a snapshot of the engine: the scheduler's counters and each
// decoder's KV cache. It is cheap to take, from any goroutine.
type Stats struct {
	Scheduler SchedStats         `json:"scheduler"`
	KV        map[string]KVStats `json:"kv"`
	// Decode is each decoder's decode steps' time by phase.
	Decode map[string]DecodePhases `json:"decode"`
	// Residency is the memory budget and the models' loads and unloads.
	Residency ResidencyStats `json:"residency"`
}

// SchedStats are the scheduler's counters since Open. Queued and
// QueuedInfer are indexed batch, interactive, realtime: read them with
// QueuedIn.
type SchedStats struct {
	// Queued is the number of waiting generation requests per class
	// (indexed by Class−1: batch, interactive, realtime); QueuedInfer the
	// waiting one-shot requests per class.
	Queued      [3]int
	QueuedInfer [3]int
	// Running is the number of admitted sequences (holding KV); Prefilling
	// how many of them still have prompt to compute.
	Running    int
	Prefilling int
	// Steps counts executor steps; DecodeTokens and PrefillTokens the tokens
	// they computed; CachedTokens prompt tokens skipped by prefix hits.
	Steps         uint64
	DecodeTokens  uint64
	PrefillTokens uint64
	CachedTokens  uint64
	// InferBatches and InferItems count one-shot batches and requests run.
	InferBatches uint64
	InferItems   uint64
	// Preemptions counts sequences whose KV was taken back.
	Preemptions uint64
	// Outcome counters, one per finished request.
	Completed, Cancelled, Rejected, TimedOut, Failed uint64
	// ExecTime is the time spent inside Executor.Step and Executor.Infer
	// during loop iterations that ran a step; LoopTime the whole of those
	// iterations. Overhead() is the share outside the executor.
	ExecTime time.Duration
	LoopTime time.Duration
	// LastOverhead is the scheduler's own time in the last step iteration.
	LastOverhead time.Duration
	// HandOffTime is the part of LoopTime − ExecTime the loop spent handing
	// sampled tokens to their streams: a token wakes the goroutine that
	// reads its stream, which the Go runtime may run on another OS thread it
	// wakes for it first (with GOMAXPROCS above 1 and a P idle), on a core
	// that is running the step's kernels. HandOffs counts those tokens.
	HandOffTime time.Duration
	HandOffs    uint64
	// PrefillRate (tokens/s) and StepTime are the current estimates used by
	// admission.
	PrefillRate float64
	StepTime    time.Duration
	// PrefillSpeed and SoloPrefillSpeed (tokens/s) are what a prompt costs
	// once admitted beside decoding streams, and on an idle device.
	PrefillSpeed     float64
	SoloPrefillSpeed float64
	// Probes counts fail-fast requests admitted on an idle device although
	// their own predicted cost was over their objective, to measure the
	// device again (one a second at most).
	Probes uint64
	// PredictedTPOT is the learnt cost model's time per output token at the
	// current number of running sequences (decode cost plus prefill share);
	// TPOTDeferred counts admissions postponed because one more row would
	// have put the running streams over their TPOT objective.
	PredictedTPOT time.Duration
	TPOTDeferred  uint64
	// RecordsDropped counts records the observers fell too far behind to
	// receive (SchedulerConfig.MaxRecords).
	RecordsDropped uint64
}

// QueuedIn is the number of generation requests waiting in class c.
func (s SchedStats) QueuedIn(c Class) int { return sched.Stats(s).QueuedIn(c.sched()) }

// Overhead is the share of the device loop's time not spent in the models.
func (s SchedStats) Overhead() float64 { return sched.Stats(s).Overhead() }

// DecodePhases is where a decoder's decode steps spent their time since it
// was loaded, summed: the graph's run (Graph), the block tables and the
// scatter of the step's keys and values into their slots (KV; a graph that
// writes them itself, a bundle built since graph revision 11 with float32
// or float16 pools, does so inside Graph), sampling
// the rows and appending their tokens (Sample). Steps counts the decode
// steps, Rows their rows. (KV + Sample) / Steps is a step's cost outside
// the graph; the scheduler's own is Scheduler.LoopTime − ExecTime.
type DecodePhases struct {
	Steps, Rows       uint64
	Graph, KV, Sample time.Duration
	// ByRows splits Steps and Graph by the steps' decode rows, fewest
	// first, one entry for each count that ran: Graph over Steps mixes
	// batch sizes as the load came and went, while a row count's own is
	// what one more stream costs a step and what compares with a loop of
	// that many rows (BenchmarkBatchScaling: eight streams against a bare
	// batch-8 loop).
	ByRows []RowPhases
}

// RowPhases are the decode steps of one row count and their graph time.
type RowPhases struct {
	Rows  int
	Steps uint64
	Graph time.Duration
}

// Row is ByRows' entry for steps of the given rows (no steps: none ran).
func (p DecodePhases) Row(rows int) RowPhases {
	for _, r := range p.ByRows {
		if r.Rows == rows {
			return r
		}
	}
	return RowPhases{Rows: rows}
}

// Since is p less an earlier snapshot p0 of the same decoder: the steps
// taken between the two.
func (p DecodePhases) Since(p0 DecodePhases) DecodePhases {
	d := DecodePhases{Steps: p.Steps - p0.Steps, Rows: p.Rows - p0.Rows, Graph: p.Graph - p0.Graph, KV: p.KV - p0.KV, Sample: p.Sample - p0.Sample}
	for _, r := range p.ByRows {
		r0 := p0.Row(r.Rows)
		if r.Steps > r0.Steps {
			d.ByRows = append(d.ByRows, RowPhases{Rows: r.Rows, Steps: r.Steps - r0.Steps, Graph: r.Graph - r0.Graph})
		}
	}
	return d
}

// decodePhases is llm's account in the engine's types.
func decodePhases(p llm.DecodePhases) DecodePhases {
	d := DecodePhases{Steps: p.Steps, Rows: p.Rows, Graph: p.Graph, KV: p.KV, Sample: p.Sample}
	for _, r := range p.ByRows {
		d.ByRows = append(d.ByRows, RowPhases(r))
	}
	return d
}

// KVStats describe one decoder's KV cache.
type KVStats struct {
	BlockSize      int
	BlockBytes     int64 // bytes of one block, all layers, keys and values
	BlocksTotal    int
	BlocksUsed     int // referenced by at least one sequence
	BlocksCached   int // unreferenced, kept for the prefix cache, evictable
	BlocksFree     int
	PeakBlocksUsed int

	BytesTotal int64 // BlocksTotal × BlockBytes
	BytesUsed  int64 // BlocksUsed × BlockBytes

	// SlotsAllocated is BlocksUsed × BlockSize; SlotsFilled those holding
	// (or reserved for) a token. Waste is the empty share of allocated
	// slots (internal fragmentation in sequences' last blocks).
	SlotsAllocated int64
	SlotsFilled    int64
	Waste          float64

	Sequences int // live sequences

	// Prefix cache: prompt tokens and full prompt blocks looked up at
	// NewSequence/Resume, and how many were found.
	PrefixQueryTokens, PrefixHitTokens int64
	PrefixQueryBlocks, PrefixHitBlocks int64
	PrefixTokenHitRate                 float64
	PrefixBlockHitRate                 float64

	Evictions   int64 // cached blocks reused for new data
	Preemptions int64

	// PrefixRestoredBlocks counts blocks restored from the persisted
	// prefix cache (Config.PrefixPersist); PrefixRestoreFailures records
	// that failed their check and were not served.
	PrefixRestoredBlocks  int64
	PrefixRestoreFailures int64
}

var (
	_ = sched.Stats(SchedStats{})
	_ = kvcache.Stats(KVStats{})
)
