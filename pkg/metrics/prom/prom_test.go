package prom

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

func TestCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, err := Register(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := metrics.NewRecorder(metrics.RecorderOptions{Observers: []metrics.Observer{c}})
	now := time.Now()
	tl := metrics.NewTimeline(1, metrics.ClassInteractive, now, 3)
	tl.Model = "assistant"
	tl.FirstScheduled = now.Add(time.Millisecond)
	for i := range 3 {
		tl.Token(now.Add(time.Duration(50+10*i) * time.Millisecond))
	}
	tl.Finish(now.Add(80*time.Millisecond), metrics.Completed)
	rec.Record(tl)
	rej := metrics.NewTimeline(2, metrics.ClassBatch, now, 0)
	rej.Model = "detector"
	rej.Finish(now, metrics.Rejected)
	rec.Record(rej)
	c.ObserveMemory("assistant", metrics.Memory{KVBlocksUsed: 7, KVBlocksTotal: 64})

	want := `
# HELP edgeinfer_requests_total Finished requests by model, class and outcome.
# TYPE edgeinfer_requests_total counter
edgeinfer_requests_total{class="batch",model="detector",outcome="rejected"} 1
edgeinfer_requests_total{class="interactive",model="assistant",outcome="completed"} 1
# HELP edgeinfer_output_tokens_total Generated tokens by model and class.
# TYPE edgeinfer_output_tokens_total counter
edgeinfer_output_tokens_total{class="batch",model="detector"} 0
edgeinfer_output_tokens_total{class="interactive",model="assistant"} 3
# HELP edgeinfer_kv_blocks_used KV cache blocks in use.
# TYPE edgeinfer_kv_blocks_used gauge
edgeinfer_kv_blocks_used{model="assistant"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"edgeinfer_requests_total", "edgeinfer_output_tokens_total", "edgeinfer_kv_blocks_used"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "edgeinfer_ttft_seconds"); n != 1 {
		t.Fatalf("ttft series %d, want 1 (the rejected request has no TTFT)", n)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}
