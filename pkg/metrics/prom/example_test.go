package prom_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/pkg/metrics/prom"
)

// Register a collector and feed it from a Recorder; serve reg with promhttp.
func Example() {
	reg := prometheus.NewRegistry()
	c, err := prom.Register(reg, prom.Options{ConstLabels: prometheus.Labels{"model": "tiny"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec := metrics.NewRecorder(metrics.RecorderOptions{Observers: []metrics.Observer{c}})
	_ = rec
	fams, _ := reg.Gather()
	fmt.Println(len(fams) > 0)
	// Output: true
}
