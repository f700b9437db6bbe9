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
// engine's records, as it reports them to its observers, go into
// accumulators (counts and mergeable histograms per phase, per window,
// overall) and are streamed as JSON lines to a timeline file, which the
// report reads back for its per-request chart. Nothing per request stays
// in memory (TestRunMemoryBounded).

// sink receives the records of requests that arrived from start on
// (until the next sink's start).
type sink struct {
	start time.Time
	acc   *metrics.Accumulator
	// phase is the index in Result.Phases, or -1 (warm-up, sweep trial):
	// only phase requests go to the timeline file and the overall figures.
	phase int
}

// collector is the run's observer: it routes each record to its sink. It
// is safe for concurrent use.
type collector struct {
	mu      sync.Mutex
	sinks   []sink
	total   int // records observed
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

func newCollector(path string) (*collector, error) {
	c := &collector{}
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
	c.sinks = append(c.sinks, s)
}

// ObserveTimeline routes one finished request's record (the engine's
// observer goroutine calls it; the record is shared: read only).
func (c *collector) ObserveTimeline(t *metrics.Timeline) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total++
	var s *sink
	for i := len(c.sinks) - 1; i >= 0; i-- {
		if !t.Arrived.Before(c.sinks[i].start) {
			s = &c.sinks[i]
			break
		}
	}
	if s == nil {
		return // arrived before this run's first stage
	}
	s.acc.Add(t)
	if s.phase < 0 {
		return
	}
	if c.overall != nil {
		c.overall.Add(t)
	}
	if err := c.enc.Encode(timelineLine{Phase: s.phase, Timeline: t}); err != nil && c.err == nil {
		c.err = fmt.Errorf("loadgen: timeline file: %w", err)
	}
	c.n++
}

// wait returns once want records in all were observed, or after most.
func (c *collector) wait(want int, most time.Duration) {
	deadline := time.Now().Add(most)
	for {
		c.mu.Lock()
		n := c.total
		c.mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
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
