// Package prom exposes pkg/metrics to Prometheus through the official
// client library. It is a separate package so that linking Prometheus stays
// opt-in: the core metrics package has no dependencies.
package prom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

// Options configures a Collector. The zero value is usable.
type Options struct {
	// Namespace prefixes every metric name; empty means "edgeinfer".
	Namespace string
	// Buckets are the latency histogram bounds in seconds; nil means 24
	// exponential buckets from 1 ms to 60 s.
	Buckets []float64
	// ConstLabels are attached to every metric (board, site, …; the model is
	// a label of its own).
	ConstLabels prometheus.Labels
}

// Collector turns recorded timelines and memory gauges into Prometheus
// metrics, labelled by model (and class). It implements
// prometheus.Collector, metrics.Observer and metrics.MemoryObserver, so it
// plugs straight into an engine's Config.Observers, and is safe for
// concurrent use.
type Collector struct {
	ttft, tpot, e2e, queue *prometheus.HistogramVec
	requests               *prometheus.CounterVec
	outputTokens           *prometheus.CounterVec
	preemptions            *prometheus.CounterVec
	kvBlocksUsed           *prometheus.GaugeVec
	kvBlocksTotal          *prometheus.GaugeVec
	kvBytesUsed            *prometheus.GaugeVec
	kvBytesPeak            *prometheus.GaugeVec
	kvBytesWaste           *prometheus.GaugeVec
	weightBytes            *prometheus.GaugeVec
}

// New returns an unregistered Collector.
func New(opt Options) *Collector {
	ns := opt.Namespace
	if ns == "" {
		ns = "edgeinfer"
	}
	buckets := opt.Buckets
	if buckets == nil {
		buckets = prometheus.ExponentialBucketsRange(0.001, 60, 24)
	}
	hist := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: name, Help: help, Buckets: buckets, ConstLabels: opt.ConstLabels,
		}, []string{"model", "class"})
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help, ConstLabels: opt.ConstLabels}, []string{"model"})
	}
	return &Collector{
		ttft:  hist("ttft_seconds", "Time from arrival to first output token."),
		tpot:  hist("tpot_seconds", "Mean time per output token after the first, per request."),
		e2e:   hist("e2e_seconds", "Time from arrival to the end of the request, any outcome."),
		queue: hist("queue_seconds", "Time from arrival to first scheduling."),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "requests_total", Help: "Finished requests by model, class and outcome.", ConstLabels: opt.ConstLabels,
		}, []string{"model", "class", "outcome"}),
		outputTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "output_tokens_total", Help: "Generated tokens by model and class.", ConstLabels: opt.ConstLabels,
		}, []string{"model", "class"}),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "preemptions_total", Help: "Times a running request was preempted.", ConstLabels: opt.ConstLabels,
		}, []string{"model"}),
		kvBlocksUsed:  gauge("kv_blocks_used", "KV cache blocks in use."),
		kvBlocksTotal: gauge("kv_blocks_capacity", "KV cache blocks in the pool."),
		kvBytesUsed:   gauge("kv_used_bytes", "KV cache bytes in use."),
		kvBytesPeak:   gauge("kv_peak_bytes", "Peak KV cache bytes in use."),
		kvBytesWaste:  gauge("kv_waste_bytes", "Allocated KV bytes holding no token."),
		weightBytes:   gauge("weight_bytes", "Bytes of model weights loaded."),
	}
}

// Register creates a Collector and registers it with reg.
func Register(reg prometheus.Registerer, opt Options) (*Collector, error) {
	c := New(opt)
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.ttft, c.tpot, c.e2e, c.queue, c.requests, c.outputTokens, c.preemptions,
		c.kvBlocksUsed, c.kvBlocksTotal, c.kvBytesUsed, c.kvBytesPeak, c.kvBytesWaste, c.weightBytes}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
}

// ObserveTimeline implements metrics.Observer: pass the Collector in an
// engine's Config.Observers or metrics.RecorderOptions.Observers.
func (c *Collector) ObserveTimeline(t *metrics.Timeline) {
	m, cl := t.Model, t.Class
	c.requests.WithLabelValues(m, cl, string(t.Outcome)).Inc()
	c.outputTokens.WithLabelValues(m, cl).Add(float64(t.OutputTokens))
	if t.Preempted > 0 {
		c.preemptions.WithLabelValues(m).Add(float64(t.Preempted))
	}
	if d, ok := t.TTFT(); ok {
		c.ttft.WithLabelValues(m, cl).Observe(d.Seconds())
	}
	if d, ok := t.TPOT(); ok {
		c.tpot.WithLabelValues(m, cl).Observe(d.Seconds())
	}
	if d, ok := t.E2E(); ok {
		c.e2e.WithLabelValues(m, cl).Observe(d.Seconds())
	}
	if d, ok := t.Queue(); ok {
		c.queue.WithLabelValues(m, cl).Observe(d.Seconds())
	}
}

// ObserveMemory implements metrics.MemoryObserver: it sets model's memory
// gauges.
func (c *Collector) ObserveMemory(model string, m metrics.Memory) {
	c.kvBlocksUsed.WithLabelValues(model).Set(float64(m.KVBlocksUsed))
	c.kvBlocksTotal.WithLabelValues(model).Set(float64(m.KVBlocksTotal))
	c.kvBytesUsed.WithLabelValues(model).Set(float64(m.KVUsedBytes))
	c.kvBytesPeak.WithLabelValues(model).Set(float64(m.KVPeakBytes))
	c.kvBytesWaste.WithLabelValues(model).Set(float64(m.KVWasteBytes))
	c.weightBytes.WithLabelValues(model).Set(float64(m.WeightBytes))
}
