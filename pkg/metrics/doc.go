// Package metrics turns per-request timelines into the figures an honest
// inference benchmark reports: queue time, TTFT, TPOT, inter-token gaps and
// end-to-end latency as percentiles (never a mean alone), goodput and SLO
// attainment where every request counts (rejected, timed-out and failed ones
// count as not meeting their SLOs), rates by request class, per-window stats
// and their jitter, and memory gauges supplied by the caller.
//
// The package is dependency-free; Prometheus exposition lives in the
// subpackage metrics/prom so that linking it stays opt-in.
package metrics
