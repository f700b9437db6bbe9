package metrics

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// mk builds a timeline: arrival at off, queued q, first token after ttft,
// then n−1 more tokens every gap, finishing with o.
func mk(class string, off, q, ttft, gap time.Duration, n int, o Outcome, slo SLO) *Timeline {
	t := NewTimeline(0, class, t0.Add(off), n)
	t.PromptTokens = 10
	if o != Rejected {
		t.FirstScheduled = t.Arrived.Add(q)
	}
	at := t.Arrived.Add(ttft)
	for range n {
		t.Token(at)
		at = at.Add(gap)
	}
	end := t.Arrived.Add(ttft + time.Duration(max(n-1, 0))*gap)
	t.Finish(end, o)
	t.SLO = slo
	return t
}

func TestTimelineDerived(t *testing.T) {
	tl := mk("interactive", 0, 5*time.Millisecond, 100*time.Millisecond, 20*time.Millisecond, 5, Completed, SLO{})
	cases := []struct {
		name string
		f    func() (time.Duration, bool)
		want time.Duration
	}{
		{"queue", tl.Queue, 5 * time.Millisecond},
		{"ttft", tl.TTFT, 100 * time.Millisecond},
		{"tpot", tl.TPOT, 20 * time.Millisecond},
		{"e2e", tl.E2E, 180 * time.Millisecond},
	}
	for _, c := range cases {
		if got, ok := c.f(); !ok || got != c.want {
			t.Errorf("%s = %v,%v want %v", c.name, got, ok, c.want)
		}
	}
	var gaps int
	for g := range tl.ITL {
		gaps++
		if g != 20*time.Millisecond {
			t.Errorf("gap %v", g)
		}
	}
	if gaps != 4 || tl.OutputTokens != 5 {
		t.Fatalf("gaps %d tokens %d", gaps, tl.OutputTokens)
	}
	one := mk("x", 0, 0, time.Millisecond, 0, 1, Completed, SLO{})
	if _, ok := one.TPOT(); ok {
		t.Fatal("TPOT defined for one token")
	}
	rej := &Timeline{Arrived: t0}
	rej.Finish(t0.Add(time.Millisecond), Rejected)
	if _, ok := rej.TTFT(); ok {
		t.Fatal("TTFT for a rejected request")
	}
}

func TestMetSLO(t *testing.T) {
	slo := SLO{TTFT: 200 * time.Millisecond, TPOT: 30 * time.Millisecond, E2E: time.Second}
	cases := []struct {
		name string
		tl   *Timeline
		want bool
	}{
		{"all met", mk("c", 0, 0, 100*time.Millisecond, 20*time.Millisecond, 10, Completed, slo), true},
		{"unbounded", mk("c", 0, 0, 10*time.Second, time.Second, 10, Completed, SLO{}), true},
		{"ttft missed", mk("c", 0, 0, 300*time.Millisecond, 20*time.Millisecond, 10, Completed, slo), false},
		{"tpot missed", mk("c", 0, 0, 100*time.Millisecond, 40*time.Millisecond, 10, Completed, slo), false},
		{"e2e missed", mk("c", 0, 0, 100*time.Millisecond, 29*time.Millisecond, 40, Completed, slo), false},
		{"timed out", mk("c", 0, 0, 100*time.Millisecond, 20*time.Millisecond, 3, TimedOut, slo), false},
		{"rejected", mk("c", 0, 0, 0, 0, 0, Rejected, SLO{}), false},
		{"cancelled", mk("c", 0, 0, 100*time.Millisecond, 20*time.Millisecond, 2, Cancelled, slo), false},
		{"no token but ttft bound", mk("c", 0, 0, 0, 0, 0, Completed, slo), false},
	}
	for _, c := range cases {
		if got := c.tl.MetSLO(); got != c.want {
			t.Errorf("%s: MetSLO = %v want %v", c.name, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	slo := SLO{TTFT: 200 * time.Millisecond}
	tls := []*Timeline{
		mk(ClassInteractive, 0, time.Millisecond, 100*time.Millisecond, 10*time.Millisecond, 11, Completed, slo),  // ends 0.2 s, good
		mk(ClassInteractive, time.Second, 0, 300*time.Millisecond, 10*time.Millisecond, 11, Completed, slo),       // misses TTFT
		mk(ClassInteractive, 2*time.Second, 0, 100*time.Millisecond, 10*time.Millisecond, 3, TimedOut, slo),       // timed out
		mk(ClassBatch, 3*time.Second, 0, 0, 0, 0, Rejected, SLO{}),                                                // rejected
		mk(ClassBatch, 3500*time.Millisecond, 0, 400*time.Millisecond, 100*time.Millisecond, 6, Completed, SLO{}), // ends 4.4 s, good
	}
	s := Summarize(tls, SummaryOptions{Window: time.Second, Memory: &Memory{KVUsedBytes: 1000, KVWasteBytes: 100}})
	if s.Requests != 5 || s.MetSLO != 2 {
		t.Fatalf("requests %d met %d", s.Requests, s.MetSLO)
	}
	if math.Abs(s.WallS-4.4) > 1e-9 {
		t.Fatalf("wall %g", s.WallS)
	}
	if *s.SLOAttainment != 0.4 {
		t.Fatalf("attainment %g", *s.SLOAttainment)
	}
	if s.GoodTokens != 17 || s.OutputTokens != 31 {
		t.Fatalf("good %d out %d", s.GoodTokens, s.OutputTokens)
	}
	if math.Abs(*s.GoodputTokS-17/4.4) > 1e-9 {
		t.Fatalf("goodput %g", *s.GoodputTokS)
	}
	if s.TTFTMs.Count != 4 || s.QueueMs.Count != 4 || s.E2EMs.Count != 5 {
		t.Fatalf("counts ttft %d queue %d e2e %d", s.TTFTMs.Count, s.QueueMs.Count, s.E2EMs.Count)
	}
	if len(s.Classes) != 2 || s.Classes[0].Class != ClassBatch {
		t.Fatalf("classes %+v", s.Classes)
	}
	inter := s.Classes[1]
	if *inter.TimeoutRate != 1.0/3 || *inter.ErrorRate != 0 || *s.Classes[0].RejectRate != 0.5 {
		t.Fatalf("rates timeout %g error %g reject %g", *inter.TimeoutRate, *inter.ErrorRate, *s.Classes[0].RejectRate)
	}
	if len(s.Windows) != 5 || s.Windows[0].Requests != 1 || s.Windows[0].Tokens != 11 {
		t.Fatalf("windows %+v", s.Windows)
	}
	if s.Jitter == nil || s.Jitter.TTFTP99.Windows != 4 || *s.Jitter.TTFTP99.Max < 399 {
		t.Fatalf("jitter %+v", s.Jitter)
	}
	if *s.Memory.KVWasteRatio != 0.1 {
		t.Fatalf("waste ratio %v", s.Memory.KVWasteRatio)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"ttft_ms":{`, `"p999":`, `"goodput_tok_s":`, `"slo_attainment":0.4`, `"timed_out":1`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s", k)
		}
	}
	if strings.Contains(string(b), "NaN") {
		t.Fatal("NaN in JSON")
	}
	// An accumulator fed the same timelines in another order gives the
	// same summary.
	a := NewAccumulator(SummaryOptions{Start: s.Start, Window: time.Second, Memory: &Memory{KVUsedBytes: 1000, KVWasteBytes: 100}})
	for _, i := range []int{4, 2, 0, 3, 1} {
		a.Add(tls[i])
	}
	ja, _ := json.Marshal(a.Summary())
	if string(ja) != string(b) {
		t.Fatalf("accumulated:\n%s\nsummarised:\n%s", ja, b)
	}
}

func TestSummarizeEmptyIsNullNotNaN(t *testing.T) {
	s := Summarize(nil, SummaryOptions{Window: time.Second})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"goodput_tok_s":null`) || !strings.Contains(string(b), `"p99":null`) {
		t.Fatalf("empty summary JSON: %s", b)
	}
}

func TestRecorderConcurrent(t *testing.T) {
	r := NewRecorder(RecorderOptions{Keep: 100})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				r.Record(mk(ClassBatch, time.Duration(g*50+i)*time.Millisecond, 0, time.Millisecond, time.Millisecond, 3, Completed, SLO{}))
			}
		})
	}
	wg.Wait()
	total, dropped := r.Counts()
	if total != 400 || dropped != 300 || len(r.Timelines()) != 100 {
		t.Fatalf("total %d dropped %d kept %d", total, dropped, len(r.Timelines()))
	}
	if c := r.Cumulative(); c.TTFTMs.Count != 400 {
		t.Fatalf("cumulative count %d", c.TTFTMs.Count)
	}
	if s := r.Summary(SummaryOptions{}); s.Requests != 100 {
		t.Fatalf("summary requests %d", s.Requests)
	}
	if n, m := len(r.Since(t0)), len(r.Since(t0.Add(time.Hour))); n != 100 || m != 0 {
		t.Fatalf("since: %d, %d", n, m)
	}
}
