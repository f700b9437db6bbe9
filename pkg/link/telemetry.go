package link

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

// TelemetrySchema versions the telemetry payload (TELEMETRY.md).
const TelemetrySchema = "edgeinfer.telemetry/1"

// Record is one finished request as telemetry needs it: the engine's
// record reduced to what the snapshot reports, so this package does not
// follow the engine's types (an adapter in the agent fills it).
type Record struct {
	Model string
	// Class is "realtime", "interactive" or "batch".
	Class string
	// Outcome is "completed", "cancelled", "rejected", "timed_out" or
	// "failed" (metrics.Outcome's spelling).
	Outcome        string
	Arrived        time.Time
	FirstScheduled time.Time // zero if never scheduled
	FirstToken     time.Time // zero if no token
	Finished       time.Time
	// TokenTimes are the output tokens' times (TokenTimes[0] ==
	// FirstToken); a one-shot request has none and OutputTokens 0.
	TokenTimes []time.Time
	// MetSLO says the request completed within all its objectives.
	MetSLO bool
}

// Observer takes finished requests; Telemetry implements it. Observe must
// not block (the engine calls it on its own goroutine).
type Observer interface{ Observe(Record) }

// EngineStats is the engine's state at snapshot time.
type EngineStats struct {
	// Preemptions is the engine's cumulative count; the snapshot reports
	// the interval's difference.
	Preemptions uint64
	KV          []KVStats
}

// KVStats is one decoder's KV cache.
type KVStats struct {
	Model      string  `json:"model"`
	UsedBytes  int64   `json:"used_bytes"`
	PeakBytes  int64   `json:"peak_bytes"`
	TotalBytes int64   `json:"total_bytes"`
	Waste      float64 `json:"waste"` // empty share of allocated slots
}

// Sensor is a measured value, or null with the reason it is absent.
type Sensor struct {
	Value  *float64 `json:"value"`
	Unit   string   `json:"unit"`
	Scope  string   `json:"scope,omitempty"`  // what a power sensor covers (wall, module, cpu package, ...)
	Source string   `json:"source,omitempty"` // the sensor's name
	Reason string   `json:"reason,omitempty"` // why Value is null
}

// ClockState says whether the device's wall clock can be trusted.
type ClockState struct {
	Synced     *bool  `json:"synced"` // null: unknown (see reason)
	MaxErrorUS int64  `json:"max_error_us,omitempty"`
	Source     string `json:"source,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Sources are what a snapshot reads beside the observed requests; any nil
// function is reported as absent (null with a reason).
type Sources struct {
	Models      func() []ModelVersion
	Engine      func() EngineStats
	Power       func() Sensor
	Temperature func() Sensor
	// Throttle returns the cumulative count of thermal throttle events.
	Throttle   func() (uint64, bool)
	StoreBytes func() (int64, error)
	Clock      func() ClockState
}

// TelemetryConfig configures Telemetry.
type TelemetryConfig struct {
	// Interval between snapshots; 0 means 10 s. SetInterval changes it.
	Interval time.Duration `json:"interval,omitempty"`
	// Sketches adds each distribution's histogram (metrics.Sketch) to the
	// snapshot, so the cloud can merge devices and intervals into exact
	// fleet-wide quantiles; it costs about 1–2 KB per distribution.
	Sketches bool `json:"sketches,omitempty"`
	// SDKVersion and Board are repeated in every snapshot.
	SDKVersion string `json:"-"`
	Board      string `json:"-"`
}

// Telemetry turns observed requests into per-interval snapshots, per model
// and class, and enqueues them in the outbox (ClassTelemetry) every
// interval. Observe is cheap and never blocks on the network: records go
// into mergeable histograms (metrics.Histogram) under a mutex.
//
// Telemetry is safe for concurrent use.
type Telemetry struct {
	link  *Link
	ob    *Outbox
	src   Sources
	cfg   TelemetryConfig
	start time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}
	sinks  []func(context.Context, Snapshot) error

	mu struct {
		sync.Mutex
		acc         map[accKey]*acc
		since       time.Time
		interval    time.Duration
		dropped     uint64 // outbox drops at the last snapshot
		preemptions uint64
		throttle    uint64
	}
}

type accKey struct{ model, class string }

type acc struct {
	ttft, tpot, itl, e2e, queue *metrics.Histogram
	outcomes                    map[string]uint64
	requests, met               uint64
	tokens, goodTokens          uint64
}

func newAcc() *acc {
	h := func() *metrics.Histogram { return metrics.NewHistogram(0) }
	return &acc{ttft: h(), tpot: h(), itl: h(), e2e: h(), queue: h(), outcomes: map[string]uint64{}}
}

// NewTelemetry returns telemetry for the device of l, enqueuing into ob.
// Call Start to begin periodic snapshots.
func NewTelemetry(l *Link, ob *Outbox, cfg TelemetryConfig, src Sources) *Telemetry {
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	t := &Telemetry{link: l, ob: ob, src: src, cfg: cfg, start: time.Now(), kick: make(chan struct{}, 1)}
	t.mu.acc = map[accKey]*acc{}
	t.mu.since = t.start
	t.mu.interval = cfg.Interval
	t.ctx, t.cancel = context.WithCancel(context.Background())
	if ob != nil {
		t.mu.dropped = ob.Stats().Dropped
	}
	if src.Engine != nil {
		t.mu.preemptions = src.Engine().Preemptions
	}
	return t
}

// Observe adds one finished request to the current interval.
func (t *Telemetry) Observe(r Record) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	t.mu.Lock()
	defer t.mu.Unlock()
	k := accKey{r.Model, r.Class}
	a := t.mu.acc[k]
	if a == nil {
		a = newAcc()
		t.mu.acc[k] = a
	}
	a.requests++
	a.outcomes[r.Outcome]++
	a.tokens += uint64(len(r.TokenTimes))
	if r.MetSLO {
		a.met++
		a.goodTokens += uint64(len(r.TokenTimes))
	}
	if !r.FirstScheduled.IsZero() {
		a.queue.Record(ms(r.FirstScheduled.Sub(r.Arrived)))
	}
	if !r.FirstToken.IsZero() {
		a.ttft.Record(ms(r.FirstToken.Sub(r.Arrived)))
	}
	if !r.Finished.IsZero() && r.Outcome == "completed" {
		a.e2e.Record(ms(r.Finished.Sub(r.Arrived)))
	}
	if n := len(r.TokenTimes); n > 1 {
		a.tpot.Record(ms(r.TokenTimes[n-1].Sub(r.TokenTimes[0])) / float64(n-1))
		for i := 1; i < n; i++ {
			a.itl.Record(ms(r.TokenTimes[i].Sub(r.TokenTimes[i-1])))
		}
	}
}

// Snapshot is the telemetry payload (schema TelemetrySchema, documented
// in TELEMETRY.md).
type Snapshot struct {
	Schema        string          `json:"schema"`
	Seq           uint64          `json:"seq"`
	Fleet         string          `json:"fleet"`
	Device        string          `json:"device"`
	SDKVersion    string          `json:"sdk_version,omitempty"`
	Board         string          `json:"board,omitempty"`
	Time          string          `json:"time"`
	IntervalStart string          `json:"interval_start"`
	IntervalS     float64         `json:"interval_s"`
	UptimeS       float64         `json:"uptime_s"`
	Clock         ClockState      `json:"clock"`
	Models        []ModelVersion  `json:"models"`
	Requests      []RequestStats  `json:"requests"`
	KV            []KVStats       `json:"kv"`
	Preemptions   *uint64         `json:"preemptions"`
	Power         Sensor          `json:"power"`
	Temperature   Sensor          `json:"temperature"`
	Throttle      *uint64         `json:"throttle_events"`
	StoreBytes    *int64          `json:"store_bytes"`
	Outbox        OutboxTelemetry `json:"outbox"`
	Link          LinkTelemetry   `json:"link"`
}

// RequestStats is one model and class over the interval.
type RequestStats struct {
	Model string `json:"model"`
	Class string `json:"class"`
	// Outcomes counts requests by outcome (completed, cancelled,
	// rejected, timed_out, failed).
	Outcomes      map[string]uint64 `json:"outcomes"`
	OutputTokens  uint64            `json:"output_tokens"`
	GoodputTokS   float64           `json:"goodput_tok_s"`
	SLOAttainment *float64          `json:"slo_attainment"`
	TTFT          Dist              `json:"ttft_ms"`
	TPOT          Dist              `json:"tpot_ms"`
	ITL           Dist              `json:"itl_ms"`
	E2E           Dist              `json:"e2e_ms"`
	Queue         Dist              `json:"queue_ms"`
}

// Dist is a distribution over the interval: count and quantiles (null
// when empty), within the histogram's 0.5 % relative error.
type Dist struct {
	N   uint64   `json:"n"`
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
	Max *float64 `json:"max"`
	// Sketch is the interval's histogram when TelemetryConfig.Sketches.
	Sketch *metrics.Sketch `json:"sketch,omitempty"`
}

// OutboxTelemetry reports the outbox; DroppedInterval counts telemetry
// dropped since the previous snapshot (the previous snapshots themselves,
// usually, during an outage).
type OutboxTelemetry struct {
	Depth           int    `json:"depth"`
	Bytes           int64  `json:"bytes"`
	DroppedTotal    uint64 `json:"dropped_total"`
	DroppedInterval uint64 `json:"dropped_interval"`
}

// LinkTelemetry reports the connection.
type LinkTelemetry struct {
	Connects     uint64 `json:"connects"`
	Failures     uint64 `json:"failures"`
	HandlerDrops uint64 `json:"handler_drops"`
}

func dist(h *metrics.Histogram) Dist {
	d := Dist{N: h.Count()}
	q := func(p float64) *float64 {
		if v, ok := h.Quantile(p); ok {
			v = math.Round(v*1000) / 1000
			return &v
		}
		return nil
	}
	d.P50, d.P95, d.P99 = q(0.5), q(0.95), q(0.99)
	if v, ok := h.Max(); ok {
		d.Max = &v
	}
	return d
}

// Snapshot closes the current interval and returns its report (Seq is
// left 0; Publish sets it). The next interval starts now.
func (t *Telemetry) Snapshot() Snapshot {
	now := time.Now()
	t.mu.Lock()
	accs, since := t.mu.acc, t.mu.since
	t.mu.acc, t.mu.since = map[accKey]*acc{}, now
	t.mu.Unlock()
	secs := now.Sub(since).Seconds()
	s := Snapshot{Schema: TelemetrySchema, SDKVersion: t.cfg.SDKVersion, Board: t.cfg.Board,
		Time: now.UTC().Format(time.RFC3339Nano), IntervalStart: since.UTC().Format(time.RFC3339Nano),
		IntervalS: secs, UptimeS: now.Sub(t.start).Seconds(), Requests: []RequestStats{}, KV: []KVStats{}, Models: []ModelVersion{}}
	if t.link != nil {
		s.Fleet, s.Device = t.link.cfg.Fleet, t.link.cfg.Device
		ls := t.link.Stats()
		s.Link = LinkTelemetry{Connects: ls.Connects, Failures: ls.Failures, HandlerDrops: ls.HandlerDrops}
	}
	keys := make([]accKey, 0, len(accs))
	for k := range accs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b accKey) int {
		if a.model != b.model {
			return compareStr(a.model, b.model)
		}
		return compareStr(a.class, b.class)
	})
	for _, k := range keys {
		a := accs[k]
		d := func(h *metrics.Histogram) Dist {
			out := dist(h)
			if t.cfg.Sketches && h.Count() > 0 {
				sk := h.Sketch()
				out.Sketch = &sk
			}
			return out
		}
		rs := RequestStats{Model: k.model, Class: k.class, Outcomes: a.outcomes, OutputTokens: a.tokens,
			TTFT: d(a.ttft), TPOT: d(a.tpot), ITL: d(a.itl), E2E: d(a.e2e), Queue: d(a.queue)}
		if secs > 0 {
			rs.GoodputTokS = float64(a.goodTokens) / secs
		}
		if a.requests > 0 {
			v := float64(a.met) / float64(a.requests)
			rs.SLOAttainment = &v
		}
		s.Requests = append(s.Requests, rs)
	}
	if t.src.Models != nil {
		s.Models = t.src.Models()
	}
	if t.src.Engine != nil {
		es := t.src.Engine()
		s.KV = append(s.KV, es.KV...)
		t.mu.Lock()
		d := es.Preemptions - min(es.Preemptions, t.mu.preemptions)
		s.Preemptions = &d
		t.mu.preemptions = es.Preemptions
		t.mu.Unlock()
	}
	s.Power = Sensor{Unit: "W", Reason: "no power sensor configured"}
	if t.src.Power != nil {
		s.Power = t.src.Power()
	}
	s.Temperature = Sensor{Unit: "C", Reason: "no thermal sensor configured"}
	if t.src.Temperature != nil {
		s.Temperature = t.src.Temperature()
	}
	if t.src.Throttle != nil {
		if n, ok := t.src.Throttle(); ok {
			t.mu.Lock()
			d := n - min(n, t.mu.throttle)
			t.mu.throttle = n
			t.mu.Unlock()
			s.Throttle = &d
		}
	}
	if t.src.StoreBytes != nil {
		if n, err := t.src.StoreBytes(); err == nil {
			s.StoreBytes = &n
		}
	}
	s.Clock = ClockState{Reason: "clock state not read"}
	if t.src.Clock != nil {
		s.Clock = t.src.Clock()
	}
	if t.ob != nil {
		obs := t.ob.Stats()
		t.mu.Lock()
		s.Outbox = OutboxTelemetry{Depth: obs.Depth, Bytes: obs.Bytes, DroppedTotal: obs.Dropped, DroppedInterval: obs.Dropped - min(obs.Dropped, t.mu.dropped)}
		t.mu.dropped = obs.Dropped
		t.mu.Unlock()
	}
	return s
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Publish takes a snapshot and enqueues it in the outbox with its seq.
func (t *Telemetry) Publish(ctx context.Context) (Snapshot, error) {
	s := t.Snapshot()
	if t.ob == nil || t.link == nil {
		return s, fmt.Errorf("link: telemetry publish: no outbox")
	}
	_, err := t.ob.Enqueue(ctx, t.link.topics.Telemetry(), ClassTelemetry, func(seq uint64) []byte {
		s.Seq = seq
		b, _ := json.Marshal(s)
		return b
	})
	return s, err
}

// AddSink has every periodic snapshot also handed to fn after it is
// enqueued (the Sparkplug node publishes it as NDATA/DDATA). Call it
// before Start.
func (t *Telemetry) AddSink(fn func(context.Context, Snapshot) error) { t.sinks = append(t.sinks, fn) }

// Start publishes a snapshot every interval until Close.
func (t *Telemetry) Start() {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			t.mu.Lock()
			d := t.mu.interval
			t.mu.Unlock()
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-t.kick:
				timer.Stop()
			case <-t.ctx.Done():
				timer.Stop()
				return
			}
			s, err := t.Publish(t.ctx)
			if err != nil && t.link != nil {
				t.link.log.Warn("link: telemetry not enqueued", "err", err)
			}
			for _, fn := range t.sinks {
				if err := fn(t.ctx, s); err != nil && t.link != nil {
					t.link.log.Debug("link: telemetry sink", "err", err)
				}
			}
		}
	}()
}

// SetInterval changes the snapshot interval (from the next snapshot on).
func (t *Telemetry) SetInterval(d time.Duration) error {
	if d < 100*time.Millisecond || d > 24*time.Hour {
		return fmt.Errorf("link: telemetry interval %v out of range [100ms, 24h]", d)
	}
	t.mu.Lock()
	t.mu.interval = d
	t.mu.Unlock()
	return nil
}

// Interval returns the snapshot interval.
func (t *Telemetry) Interval() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.interval
}

// Now publishes a snapshot at once (the snapshot command).
func (t *Telemetry) Now() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Close stops the periodic snapshots and joins the goroutine.
func (t *Telemetry) Close() error {
	t.cancel()
	t.wg.Wait()
	return nil
}
