package engine

import (
	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"sync"
	"testing"
	"time"
)

// sink is an observer that keeps the records it is told of, for tests.
type sink struct {
	mu   sync.Mutex
	recs []*Record
}

func (s *sink) ObserveTimeline(r *Record) {
	s.mu.Lock()
	s.recs = append(s.recs, r)
	s.mu.Unlock()
}

// take waits (up to 10 s) until at least n records arrived, and returns and
// forgets all of them. Records reach observers shortly after a request
// ends, on the engine's own goroutine.
func (s *sink) take(tb testing.TB, n int) []*Record {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		if len(s.recs) >= n {
			r := s.recs
			s.recs = nil
			s.mu.Unlock()
			return r
		}
		got := len(s.recs)
		s.mu.Unlock()
		if time.Now().After(deadline) {
			tb.Fatalf("%d records after 10 s, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
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
