package prom_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/pkg/metrics/prom"
)

// Register a collector and feed it from a Recorder; serve reg with promhttp.
// With an engine, pass the collector in its Config.Observers instead: it
// gets every finished request and each model's KV gauges.
func Example() {
	reg := prometheus.NewRegistry()
	c, err := prom.Register(reg, prom.Options{ConstLabels: prometheus.Labels{"site": "store-12"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec := metrics.NewRecorder(metrics.RecorderOptions{Observers: []metrics.Observer{c}})
	tl := metrics.NewTimeline(1, metrics.ClassInteractive, time.Now(), 0)
	tl.Model = "assistant"
	tl.Finish(time.Now(), metrics.Completed)
	rec.Record(tl)
	fams, _ := reg.Gather()
	fmt.Println(len(fams) > 0)
	// Output: true
}
