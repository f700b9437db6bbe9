package metrics_test

import (
	"fmt"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

func Example() {
	rec := metrics.NewRecorder(metrics.RecorderOptions{})
	start := time.Now()
	for i := range 4 {
		arrived := start.Add(time.Duration(i) * 100 * time.Millisecond)
		tl := metrics.NewTimeline(uint64(i), metrics.ClassInteractive, arrived, 8)
		tl.SLO = metrics.SLO{TTFT: 300 * time.Millisecond}
		tl.FirstScheduled = arrived.Add(10 * time.Millisecond)
		ttft := time.Duration(100+100*i) * time.Millisecond // the last misses its SLO
		for k := range 8 {
			tl.Token(arrived.Add(ttft + time.Duration(k)*20*time.Millisecond))
		}
		tl.Finish(arrived.Add(ttft+140*time.Millisecond), metrics.Completed)
		rec.Record(tl)
	}
	s := rec.Summary(metrics.SummaryOptions{})
	// Quantiles are estimates within 0.5 % (199 for an exact 200).
	fmt.Printf("requests %d, SLO attainment %.2f, TTFT p50 %.0f ms, TPOT p99 %.0f ms\n",
		s.Requests, *s.SLOAttainment, *s.TTFTMs.P50, *s.TPOTMs.P99)
	// Output: requests 4, SLO attainment 0.75, TTFT p50 199 ms, TPOT p99 20 ms
}

func ExampleHistogram() {
	h := metrics.NewHistogram(0) // 0.5 % relative error
	for v := 1; v <= 1000; v++ {
		h.Record(float64(v))
	}
	p99, _ := h.Quantile(0.99)
	fmt.Printf("p99 ≈ %.0f (exact 990)\n", p99)
	// Output: p99 ≈ 987 (exact 990)
}
