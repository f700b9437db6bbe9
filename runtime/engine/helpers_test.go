package engine

import (
	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"sync"
	"testing"
	"time"
)

// sink is an observer that keeps the records it is told of, for tests.
// Waiting for records waits on their arrival (arrived), not on a clock.
type sink struct {
	mu      sync.Mutex
	recs    []*Record
	arrived chan struct{} // capacity 1: "a record came"; made on first use
}

func (s *sink) signal() chan struct{} {
	if s.arrived == nil {
		s.arrived = make(chan struct{}, 1)
	}
	return s.arrived
}

func (s *sink) ObserveTimeline(r *Record) {
	s.mu.Lock()
	s.recs = append(s.recs, r)
	c := s.signal()
	s.mu.Unlock()
	select {
	case c <- struct{}{}:
	default:
	}
}

// take waits (up to 10 s) until at least n records arrived, and returns and
// forgets all of them. Records reach observers shortly after a request
// ends, on the engine's own goroutine.
func (s *sink) take(tb testing.TB, n int) []*Record {
	tb.Helper()
	return s.takeWhere(tb, n, func(*Record) bool { return true })
}

// takeWhere waits (up to 10 s) until at least n records that keep reports
// true of arrived, and returns and forgets those; the others are dropped.
func (s *sink) takeWhere(tb testing.TB, n int, keep func(*Record) bool) []*Record {
	tb.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	var got []*Record
	for {
		s.mu.Lock()
		for _, r := range s.recs {
			if keep(r) {
				got = append(got, r)
			}
		}
		s.recs = nil
		c := s.signal()
		s.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-c:
		case <-timeout.C:
			tb.Fatalf("%d records after 10 s, want %d", len(got), n)
		}
	}
}

// reset forgets what arrived so far.
func (s *sink) reset() {
	s.mu.Lock()
	s.recs = nil
	s.mu.Unlock()
}

func ttft(r *Record) time.Duration { d, _ := r.TTFT(); return d }
func tpot(r *Record) time.Duration { d, _ := r.TPOT(); return d }

var sinks sync.Map // *Engine → *sink, for engines opened by openBench

func sinkOf(e *Engine) *sink {
	s, _ := sinks.Load(e)
	return s.(*sink)
}

func bundleGen(temp float64, topK int) bundle.Generation {
	return bundle.Generation{Temperature: temp, TopK: topK}
}
