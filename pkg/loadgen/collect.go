package loadgen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

// The harness keeps its memory bounded whatever the run's length: the
// engine's records are drained every series tick into accumulators
// (counts and mergeable histograms per phase, per window, overall) and
// streamed as JSON lines to a timeline file, which the report reads back
// for its per-request chart. Nothing per request stays in memory
// (TestRunMemoryBounded).

// sink receives the records of requests that arrived from start on
// (until the next sink's start).
type sink struct {
	start time.Time
	acc   *metrics.Accumulator
	// phase is the index in Result.Phases, or -1 (warm-up, sweep trial):
	// only phase requests go to the timeline file and the overall figures.
	phase int
}

// collector routes drained records to sinks. It is safe for concurrent
// use (the series ticker and the run goroutine both collect).
type collector struct {
	mu      sync.Mutex
	e       Engine
	sinks   []sink
	overall *metrics.Accumulator
	file    *os.File
	w       *bufio.Writer
	enc     *json.Encoder
	n       int // requests written
	err     error
}

// timelineLine is one line of the timeline file.
type timelineLine struct {
	Phase    int               `json:"phase"`
	Timeline *metrics.Timeline `json:"timeline"`
}

func newCollector(e Engine, path string) (*collector, error) {
	c := &collector{e: e}
	var err error
	if path == "" {
		c.file, err = os.CreateTemp("", "edgeinfer-timelines-*.jsonl")
	} else {
		c.file, err = os.Create(path)
	}
	if err != nil {
		return nil, fmt.Errorf("loadgen: timeline file: %w", err)
	}
	c.w = bufio.NewWriterSize(c.file, 64<<10)
	c.enc = json.NewEncoder(c.w)
	return c, nil
}

// add starts a sink from start on.
func (c *collector) add(s sink) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.collectLocked()
	c.sinks = append(c.sinks, s)
}

// collect drains the engine's finished records into their sinks.
func (c *collector) collect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.collectLocked()
}

func (c *collector) collectLocked() {
	for _, rec := range c.e.Records() {
		var s *sink
		for i := len(c.sinks) - 1; i >= 0; i-- {
			if !rec.Arrived.Before(c.sinks[i].start) {
				s = &c.sinks[i]
				break
			}
		}
		if s == nil {
			continue // arrived before this run's first stage
		}
		t := toMetrics(rec)
		s.acc.Add(t)
		if s.phase < 0 {
			continue
		}
		if c.overall != nil {
			c.overall.Add(t)
		}
		if err := c.enc.Encode(timelineLine{Phase: s.phase, Timeline: t}); err != nil && c.err == nil {
			c.err = fmt.Errorf("loadgen: timeline file: %w", err)
		}
		c.n++
	}
}

// close flushes the file; it stays on disk for the report.
func (c *collector) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.err
	if ferr := c.w.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("loadgen: timeline file: %w", ferr)
	}
	if cerr := c.file.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("loadgen: timeline file: %w", cerr)
	}
	return err
}

// readRequestPoints reads the timeline file back as chart points, every
// stride-th request so that at most max points come back.
func readRequestPoints(path string, count, most int, start time.Time) ([]RequestPoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loadgen: timeline file: %w", err)
	}
	defer f.Close()
	stride := max(1, (count+most-1)/most)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var out []RequestPoint
	for i := 0; sc.Scan(); i++ {
		if i%stride != 0 {
			continue
		}
		var l timelineLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return out, fmt.Errorf("loadgen: timeline file line %d: %w", i+1, err)
		}
		out = append(out, requestPoint(l.Timeline, start, l.Phase))
	}
	return out, sc.Err()
}
