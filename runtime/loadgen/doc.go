// Package loadgen is edgeinfer's acceptance benchmark: it drives an engine
// in-process (Run), or any OpenAI-compatible server over HTTP (RunTarget
// with an HTTPTarget: edgeinfer serve, llama-server, Ollama, vLLM), with a
// declared workload, collects every request's timeline
// (rejected and timed-out requests included), samples power and thermal
// sensors beside it, and writes a report — report.json (schema
// "edgeinfer.bench/v1"), report.md and a self-contained report.html with
// SVG charts — with a version matrix and a verdict per threshold: pass,
// retest (evidence incomplete) or block.
//
// # Workload spec
//
// A spec is YAML or JSON; unknown fields are errors and every validation
// error names its field ("phases[2].arrival.rate: must be > 0"). Durations
// are Go duration strings ("1.5s", "300ms") or numbers of seconds.
//
//	name: chat-acceptance
//	model: ""                       # engine model name; "" = first decoder
//	seed: 1                         # prompts, lengths and arrivals reproducible
//	prompts:
//	  corpus: [examples/tinylm/testdata/heldout.txt]   # omitted: synthetic ids
//	input:  {kind: uniform, min: 16, max: 96}          # prompt tokens
//	output: {kind: normal, mean: 32, stddev: 8, min: 8, max: 64}  # max new tokens
//	class: interactive              # batch | interactive | realtime
//	slo:
//	  preset: interactive-chat      # interactive-chat | voice-agent | batch
//	  ttft: 300ms                   # per-request objectives (override the preset)
//	  tpot: 50ms
//	  e2e: 0s                       # 0 = unbounded
//	thresholds:                     # judged into verdicts; preset ones are added
//	  - {metric: ttft_ms.p99, max: 300}
//	  - {metric: slo_attainment, min: 0.95, phase: burst}
//	warmup: 3s                      # one request at a time, excluded from stats
//	idle: 1s                        # power idle baseline before and after
//	drain: 5s                       # wait for stragglers, then cancel them
//	request_timeout: 60s
//	window: 5s                      # jitter windows
//	phases:                         # the seeds' 低压基线/逐步加压/突发压力/流量回落
//	  - {name: baseline, kind: baseline, duration: 12s, arrival: {mode: closed, concurrency: 1}}
//	  - {name: ramp, kind: ramp, duration: 16s, arrival: {mode: closed, concurrency: 1, concurrency_to: 8}}
//	  - {name: burst, kind: burst, duration: 12s, arrival: {mode: burst, burst_size: 12, burst_every: 3s, rate: 4}}
//	  - {name: recovery, kind: recovery, duration: 12s, arrival: {mode: poisson, rate: 2}}
//	  - {name: replay, kind: custom, duration: 10s, arrival: {mode: trace, trace: arrivals.txt}}
//	sweep: {mode: concurrency, min: 1, max: 16, trial: 2s, max_trials: 5, min_attainment: 0.9}
//
// Threshold metrics are <ttft_ms|tpot_ms|itl_ms|e2e_ms|queue_ms>.<p50|p90|
// p95|p99|p999>, slo_attainment, goodput_tok_s, throughput_tok_s,
// failure_rate and energy_j_per_token. A quantile needs 1/(1−q) samples
// (p99: 100) before it can pass; fewer gives retest. A latency limit below
// the fastest unloaded value (warm-up) is block with the reason "no load
// can meet …"; a sweep whose lowest load failed a limit only adds that to a
// miss the run measured itself (a short trial is weaker evidence). Energy with
// no sensor, a window shorter than the sensor's resolution, or gaps in the
// sensor's readings (a vanished file, a counter reset: joules over part of
// the run against tokens over all of it) is retest.
//
// report.json's "power" is pkg/power's report (energy_j null with
// unavailable_reasons where no sensor answers) plus trace_w and temp_c,
// the primary source's power and the hottest zone's temperature over the
// run, downsampled to at most 300 points each; the HTML timeline draws
// them as lines under the phase bands, with holes where the sensor had
// gaps.
//
// The sweep doubles the load from min until a trial fails or max is
// reached, then bisects; each trial is a closed loop (or Poisson rate) of
// `trial` length judged on the run-wide thresholds and min_attainment. Its
// points are the throughput–latency curve; the highest stable load is
// max_stable_concurrency (or max_stable_rate). When no trial failed —
// the search reached max or ran out of max_trials — that figure is only a
// lower bound: the report says "≥ N" with why the search stopped
// (sweep.lower_bound, sweep.stopped, max_stable_is_lower_bound).
//
// The built-in "demo" profile (DemoSpec) is sized for a 2-core VM and the
// tiny trained model: about 70 s including warm-up and idle baselines;
// --sweep adds DefaultSweep (doubling 1 … 128 past the engine's batch to
// the knee, at most 8 trials of 3 s).
package loadgen
