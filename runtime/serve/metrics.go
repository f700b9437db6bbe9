package serve

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgeinfer/edgeinfer/pkg/metrics/prom"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// serverMetrics is /metrics: the engine's request timelines (latency
// histograms, outcomes, tokens: pkg/metrics/prom), the engine's queue and
// KV cache read at scrape time, the HTTP layer's counters, and the Go
// runtime and process (resident memory, goroutines) so a leak shows.
type serverMetrics struct {
	reg      *prometheus.Registry
	timeline *prom.Collector
	requests *prometheus.CounterVec
	streams  prometheus.Gauge
	handler  http.Handler
}

func newServerMetrics(e *engine.Engine) (*serverMetrics, error) {
	m := &serverMetrics{reg: prometheus.NewRegistry(), timeline: prom.New(prom.Options{})}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "edgeinfer", Subsystem: "http", Name: "requests_total",
		Help: "HTTP requests answered, by path and status code."}, []string{"path", "code"})
	m.streams = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "edgeinfer", Subsystem: "http", Name: "streams_active",
		Help: "Server-sent event streams open now."})
	for _, c := range []prometheus.Collector{m.timeline, m.requests, m.streams, &engineCollector{e: e},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m, nil
}

func (m *serverMetrics) request(path string, code int) {
	m.requests.WithLabelValues(path, strconv.Itoa(code)).Inc()
}

// engineCollector reads the engine's queue and KV cache at scrape time.
type engineCollector struct{ e *engine.Engine }

var (
	queuedDesc  = prometheus.NewDesc("edgeinfer_engine_queued_requests", "Generation requests waiting for admission.", nil, nil)
	runningDesc = prometheus.NewDesc("edgeinfer_engine_running_requests", "Admitted sequences holding KV cache.", nil, nil)
	kvUsedDesc  = prometheus.NewDesc("edgeinfer_engine_kv_blocks_used", "KV cache blocks in use, per decoder.", []string{"model"}, nil)
	kvTotalDesc = prometheus.NewDesc("edgeinfer_engine_kv_blocks", "KV cache blocks in the pool, per decoder.", []string{"model"}, nil)
	kvBytesDesc = prometheus.NewDesc("edgeinfer_engine_kv_used_bytes", "KV cache bytes in use, per decoder.", []string{"model"}, nil)
	// A serving cache fills with prefix entries and then takes every new
	// block by evicting one: these say whether it has, and what the prefix
	// cache still saves.
	kvCachedDesc    = prometheus.NewDesc("edgeinfer_engine_kv_blocks_cached", "KV cache blocks no sequence uses that hold a prefix-cache entry, per decoder.", []string{"model"}, nil)
	kvEvictDesc     = prometheus.NewDesc("edgeinfer_engine_kv_evictions_total", "Prefix-cache blocks evicted to make room, per decoder.", []string{"model"}, nil)
	prefixQueryDesc = prometheus.NewDesc("edgeinfer_engine_prefix_query_tokens_total", "Prompt tokens looked up in the prefix cache, per decoder.", []string{"model"}, nil)
	prefixHitDesc   = prometheus.NewDesc("edgeinfer_engine_prefix_hit_tokens_total", "Prompt tokens found in the prefix cache (not recomputed), per decoder.", []string{"model"}, nil)

	// A decode step's graph time by its batch size, from the steps the
	// device served (engine.DecodePhases.ByRows):
	// rate(…graph_seconds_total) / rate(…steps_total) is what a step of
	// that many streams takes on this board, the curve TPOT follows as
	// load rises.
	decodeStepsDesc = prometheus.NewDesc("edgeinfer_engine_decode_steps_total", "Decode steps run, per decoder and batch size (rows).", []string{"model", "rows"}, nil)
	decodeGraphDesc = prometheus.NewDesc("edgeinfer_engine_decode_graph_seconds_total", "Time decode steps spent in the model's graph, per decoder and batch size (rows).", []string{"model", "rows"}, nil)

	budgetDesc   = prometheus.NewDesc("edgeinfer_engine_memory_budget_bytes", "The memory budget of the loaded models (0: none).", nil, nil)
	residentDesc = prometheus.NewDesc("edgeinfer_engine_memory_used_bytes", "What the loaded models (and loads under way) count against the memory budget: bundle files and KV budgets.", nil, nil)
	loadsDesc    = prometheus.NewDesc("edgeinfer_engine_model_loads_total", "Model versions loaded (at start, by Load or Swap, on demand).", nil, nil)
	loadTimeDesc = prometheus.NewDesc("edgeinfer_engine_model_load_seconds_total", "Time spent loading model versions.", nil, nil)
	unloadsDesc  = prometheus.NewDesc("edgeinfer_engine_model_unloads_total", "Models unloaded by the engine, by reason: room (for a load under the memory budget), keep_alive (idle past it).", []string{"reason"}, nil)
	freedDesc    = prometheus.NewDesc("edgeinfer_engine_model_versions_freed_total", "Model versions freed, whatever unloaded them (the budget, a keep-alive, Unload, Swap).", nil, nil)
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queuedDesc, runningDesc, kvUsedDesc, kvTotalDesc, kvBytesDesc, kvCachedDesc, kvEvictDesc,
		prefixQueryDesc, prefixHitDesc, decodeStepsDesc, decodeGraphDesc, budgetDesc, residentDesc, loadsDesc, loadTimeDesc, unloadsDesc, freedDesc} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.e.Stats()
	ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(queued(st.Scheduler)))
	ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(st.Scheduler.Running))
	res := st.Residency
	ch <- prometheus.MustNewConstMetric(budgetDesc, prometheus.GaugeValue, float64(res.BudgetBytes))
	ch <- prometheus.MustNewConstMetric(residentDesc, prometheus.GaugeValue, float64(res.UsedBytes))
	ch <- prometheus.MustNewConstMetric(loadsDesc, prometheus.CounterValue, float64(res.Loads))
	ch <- prometheus.MustNewConstMetric(loadTimeDesc, prometheus.CounterValue, res.LoadTime.Seconds())
	ch <- prometheus.MustNewConstMetric(unloadsDesc, prometheus.CounterValue, float64(res.Evictions), "room")
	ch <- prometheus.MustNewConstMetric(unloadsDesc, prometheus.CounterValue, float64(res.Expiries), "keep_alive")
	ch <- prometheus.MustNewConstMetric(freedDesc, prometheus.CounterValue, float64(res.Unloads))
	for name, kv := range st.KV {
		ch <- prometheus.MustNewConstMetric(kvUsedDesc, prometheus.GaugeValue, float64(kv.BlocksUsed), name)
		ch <- prometheus.MustNewConstMetric(kvTotalDesc, prometheus.GaugeValue, float64(kv.BlocksTotal), name)
		ch <- prometheus.MustNewConstMetric(kvBytesDesc, prometheus.GaugeValue, float64(kv.BytesUsed), name)
		ch <- prometheus.MustNewConstMetric(kvCachedDesc, prometheus.GaugeValue, float64(kv.BlocksCached), name)
		ch <- prometheus.MustNewConstMetric(kvEvictDesc, prometheus.CounterValue, float64(kv.Evictions), name)
		ch <- prometheus.MustNewConstMetric(prefixQueryDesc, prometheus.CounterValue, float64(kv.PrefixQueryTokens), name)
		ch <- prometheus.MustNewConstMetric(prefixHitDesc, prometheus.CounterValue, float64(kv.PrefixHitTokens), name)
	}
	for name, d := range st.Decode {
		for _, r := range d.ByRows {
			rows := strconv.Itoa(r.Rows)
			ch <- prometheus.MustNewConstMetric(decodeStepsDesc, prometheus.CounterValue, float64(r.Steps), name, rows)
			ch <- prometheus.MustNewConstMetric(decodeGraphDesc, prometheus.CounterValue, r.Graph.Seconds(), name, rows)
		}
	}
}
