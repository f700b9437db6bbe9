package loadgen

import (
	"context"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// Engine is what the harness needs of an engine; *engine.Engine implements
// it. The harness runs in-process, so what it measures is the SDK's own
// timeline, stamped on the device loop, which it receives as an observer.
type Engine interface {
	GenerateTokens(ctx context.Context, model string, prompt []int32, opts engine.GenerateOptions) *engine.Stream
	Observe(o engine.Observer) (remove func())
	Stats() engine.Stats
	Models() []engine.ModelInfo
	Scheduler() engine.SchedulerConfig
	Tokenizer(model string) *tokenizer.Tokenizer
}

var _ Engine = (*engine.Engine)(nil)

// collector keeps the records the engine reports during a run.
type collector struct {
	mu    sync.Mutex
	recs  []*metrics.Timeline
	total int
}

func (c *collector) ObserveTimeline(t *metrics.Timeline) {
	c.mu.Lock()
	c.recs = append(c.recs, t)
	c.total++
	c.mu.Unlock()
}

// take returns and forgets the records so far, after waiting (up to wait)
// until want records in all have arrived: the engine tells observers
// shortly after a request ends, on its own goroutine.
func (c *collector) take(want int, wait time.Duration) []*metrics.Timeline {
	deadline := time.Now().Add(wait)
	for {
		c.mu.Lock()
		if c.total >= want || time.Now().After(deadline) {
			r := c.recs
			c.recs = nil
			c.mu.Unlock()
			return r
		}
		c.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

func classOf(s string) engine.Class {
	c, err := engine.ParseClass(s)
	if err != nil {
		return engine.ClassInteractive
	}
	return c
}
