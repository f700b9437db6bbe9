package sched

import (
	"fmt"
	"time"
)

// Config is the scheduler's configuration: flat plain data with documented
// zero values (zero means "the default"), checked by Validate.
type Config struct {
	// MaxBatch caps sequences admitted at once (decoding or prefilling), so
	// also the decode rows of a step. Zero means 8.
	MaxBatch int
	// ChunkSize caps the tokens of one prefill chunk, which bounds how much a
	// long prompt adds to a step and hence to the running streams' ITL.
	// Zero means 256.
	ChunkSize int
	// TokenBudget caps the tokens of one step: decode rows first, prefill
	// chunks spend the rest. Zero means MaxBatch + ChunkSize. A step always
	// has room for at least one prefill token when a prompt waits.
	TokenBudget int
	// MaxPrefillChunks caps the prefill chunks (sequences) of one step. Zero
	// means 1: the paged decoder runs a prefill chunk as its own 1×C run.
	MaxPrefillChunks int
	// AdmitReserve is the number of tokens beyond the prompt that must fit in
	// the KV cache to admit a sequence. Zero means 16.
	AdmitReserve int
	// QueueLimit bounds each class queue (waiting generation and one-shot
	// requests counted together); a full queue refuses with ErrQueueFull.
	// Zero means 256.
	QueueLimit int
	// NoPriorityPreemption stops a higher-class arrival from preempting
	// lower-class running sequences (KV exhaustion still preempts).
	NoPriorityPreemption bool
	// StrictFIFO keeps admission in arrival order within a class even when
	// the head can no longer meet its TTFT objective. By default such a
	// request yields to the first one behind it that still can (it has
	// missed its objective either way; serving it first would make the next
	// ones miss theirs too).
	StrictFIFO bool
	// NoTPOTAdmission turns off TPOT-aware batch sizing: by default a
	// sequence is admitted beside running ones only while the predicted step
	// (decode cost at one more row plus the prefill share, learnt from the
	// steps run) stays within the tightest TPOT objective among them.
	NoTPOTAdmission bool
	// PrefillRateHint seeds the prefill throughput estimate (tokens/s) used
	// to predict TTFT before any step was measured. Zero means no prediction
	// until the first prefill step: fail-fast requests are then accepted.
	PrefillRateHint float64
	// EWMAAlpha weights each new measurement in the throughput and step-time
	// estimates. Zero means 0.2.
	EWMAAlpha float64
	// InferMaxBatch caps a one-shot batch. Zero means 8.
	InferMaxBatch int
	// InferMaxDelay is how long the first queued one-shot request of a model
	// may wait for others to join its batch. Zero means no waiting: it runs
	// at the next step boundary with whatever has queued.
	InferMaxDelay time.Duration
	// MaxRecords bounds the finished timelines kept until Records drains
	// them; beyond it the oldest are dropped and counted in
	// Stats.RecordsDropped. Zero means 65536.
	MaxRecords int
}

// FIFO returns c changed to behave as a one-at-a-time FIFO engine: one
// sequence at a time, its whole prompt in one step, no priority preemption,
// strictly first come first served.
// It is the baseline of the goodput comparison.
func (c Config) FIFO() Config {
	c.MaxBatch = 1
	c.ChunkSize = 1 << 30
	c.TokenBudget = 1 << 30
	c.MaxPrefillChunks = 1
	c.NoPriorityPreemption = true
	c.StrictFIFO = true
	return c
}

// Validate reports a negative or out-of-range field.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxBatch", c.MaxBatch}, {"ChunkSize", c.ChunkSize}, {"TokenBudget", c.TokenBudget},
		{"MaxPrefillChunks", c.MaxPrefillChunks}, {"AdmitReserve", c.AdmitReserve},
		{"QueueLimit", c.QueueLimit}, {"InferMaxBatch", c.InferMaxBatch}, {"MaxRecords", c.MaxRecords},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s = %d is negative", ErrInvalidConfig, f.name, f.v)
		}
	}
	if c.PrefillRateHint < 0 || c.PrefillRateHint != c.PrefillRateHint {
		return fmt.Errorf("%w: PrefillRateHint = %v", ErrInvalidConfig, c.PrefillRateHint)
	}
	if !(c.EWMAAlpha >= 0 && c.EWMAAlpha <= 1) {
		return fmt.Errorf("%w: EWMAAlpha = %v not in [0, 1]", ErrInvalidConfig, c.EWMAAlpha)
	}
	if c.InferMaxDelay < 0 {
		return fmt.Errorf("%w: InferMaxDelay = %v is negative", ErrInvalidConfig, c.InferMaxDelay)
	}
	return nil
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxBatch, 8)
	def(&c.ChunkSize, 256)
	def(&c.TokenBudget, c.MaxBatch+c.ChunkSize)
	def(&c.MaxPrefillChunks, 1)
	def(&c.AdmitReserve, 16)
	def(&c.QueueLimit, 256)
	def(&c.InferMaxBatch, 8)
	def(&c.MaxRecords, 65536)
	if c.EWMAAlpha == 0 {
		c.EWMAAlpha = 0.2
	}
	return c
}
