package metrics

import (
	"sync"
	"time"
)

// Observer is told of every finished request's timeline: by a Recorder, of
// each it accepts, and by the engine (its Config.Observers), of each
// request. The Prometheus collector, the cloud link's telemetry and the
// Recorder itself are observers. ObserveTimeline is called without any lock
// of the caller held; t is shared between observers and never written again:
// it may be kept, but must not be modified.
type Observer interface {
	ObserveTimeline(t *Timeline)
}

// RecorderOptions configures a Recorder. The zero value keeps every
// timeline, which suits a benchmark; a long-running engine sets Keep.
type RecorderOptions struct {
	// Keep bounds the retained timelines (the oldest are dropped first);
	// zero keeps all. Cumulative histograms always cover every timeline.
	Keep int
	// RelativeError of the histograms; zero means DefaultRelativeError.
	RelativeError float64
	// Observers are told of each recorded timeline.
	Observers []Observer
}

// Recorder accepts finished timelines from many goroutines. It is safe for
// concurrent use.
type Recorder struct {
	opt RecorderOptions
	mu  struct {
		sync.Mutex
		ring    []*Timeline // retained, oldest at head
		head    int
		total   uint64
		dropped uint64
		cum     dists
	}
}

// NewRecorder returns an empty recorder.
func NewRecorder(opt RecorderOptions) *Recorder {
	r := &Recorder{opt: opt}
	r.mu.cum = newDists(opt.RelativeError)
	return r
}

// Record accepts a finished timeline and takes ownership of it: the caller
// must not modify t (or reuse its Tokens slice) afterwards.
func (r *Recorder) Record(t *Timeline) {
	r.mu.Lock()
	r.mu.total++
	r.mu.cum.add(t)
	if r.opt.Keep > 0 && len(r.mu.ring) == r.opt.Keep {
		r.mu.ring[r.mu.head] = t
		r.mu.head = (r.mu.head + 1) % r.opt.Keep
		r.mu.dropped++
	} else {
		r.mu.ring = append(r.mu.ring, t)
	}
	r.mu.Unlock()
	for _, o := range r.opt.Observers {
		o.ObserveTimeline(t)
	}
}

// Timelines returns the retained timelines, oldest first. The timelines
// are shared: treat them as read-only.
func (r *Recorder) Timelines() []*Timeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Timeline, 0, len(r.mu.ring))
	out = append(out, r.mu.ring[r.mu.head:]...)
	return append(out, r.mu.ring[:r.mu.head]...)
}

// Counts returns how many timelines were recorded and how many of them are
// no longer retained (Keep).
func (r *Recorder) Counts() (total, dropped uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.total, r.mu.dropped
}

// Cumulative returns the all-time latency distributions (ms), including
// timelines no longer retained.
func (r *Recorder) Cumulative() Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.cum.latency()
}

// Summary summarises the retained timelines.
func (r *Recorder) Summary(opt SummaryOptions) Summary {
	return Summarize(r.Timelines(), opt)
}

// Since returns the retained timelines that arrived at or after t, for a
// summary of a recent span (a phase of a benchmark).
func (r *Recorder) Since(t time.Time) []*Timeline {
	all := r.Timelines()
	out := all[:0:0]
	for _, tl := range all {
		if !tl.Arrived.Before(t) {
			out = append(out, tl)
		}
	}
	return out
}

// ObserveTimeline makes a Recorder an Observer (of an engine, say).
func (r *Recorder) ObserveTimeline(t *Timeline) { r.Record(t) }

// MemoryObserver is told of each model's memory gauges (an engine calls it
// after the records of every step that finished requests, and on Stats).
type MemoryObserver interface {
	ObserveMemory(model string, m Memory)
}
