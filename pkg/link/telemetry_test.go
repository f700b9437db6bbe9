package link

import (
	"encoding/json"
	"testing"
	"time"
)

func TestTelemetrySnapshot(t *testing.T) {
	tel := NewTelemetry(nil, nil, TelemetryConfig{}, Sources{})
	t0 := time.Now()
	for i := 0; i < 100; i++ {
		r := Record{Model: "m", Class: "interactive", Outcome: "completed", Arrived: t0,
			FirstScheduled: t0.Add(time.Millisecond), FirstToken: t0.Add(time.Duration(10+i) * time.Millisecond),
			MetSLO: i < 90}
		for k := 0; k < 5; k++ {
			r.TokenTimes = append(r.TokenTimes, r.FirstToken.Add(time.Duration(k)*20*time.Millisecond))
		}
		r.Finished = r.TokenTimes[4]
		tel.Observe(r)
	}
	tel.Observe(Record{Model: "m", Class: "batch", Outcome: "rejected", Arrived: t0, Finished: t0})
	s := tel.Snapshot()
	if len(s.Requests) != 2 {
		t.Fatalf("%d groups, want 2 (model × class)", len(s.Requests))
	}
	var in RequestStats
	for _, r := range s.Requests {
		if r.Class == "interactive" {
			in = r
		}
	}
	if in.Outcomes["completed"] != 100 || in.TTFT.N != 100 || *in.SLOAttainment != 0.9 || in.ITL.N != 400 {
		t.Fatalf("interactive: %+v", in)
	}
	if p := *in.TTFT.P99; p < 107 || p > 110 {
		t.Errorf("ttft p99 %.2f ms, want ~109", p)
	}
	if p := *in.TPOT.P50; p < 19.8 || p > 20.2 {
		t.Errorf("tpot p50 %.2f ms, want 20", p)
	}
	if s.Power.Value != nil || s.Power.Reason == "" || s.Temperature.Reason == "" {
		t.Errorf("absent sensors must be null with a reason: %+v %+v", s.Power, s.Temperature)
	}
	// the next interval starts empty
	if s2 := tel.Snapshot(); len(s2.Requests) != 0 {
		t.Errorf("second snapshot repeats the first interval: %+v", s2.Requests)
	}
	b, _ := json.Marshal(s)
	t.Logf("%d bytes: %.300s", len(b), b)
}

// TestTelemetrySketches: with sketches on, two devices' intervals merge
// in the cloud into the quantiles one histogram of both would give.
func TestTelemetrySketches(t *testing.T) {
	t0 := time.Now()
	var snaps []Snapshot
	for dev := 0; dev < 2; dev++ {
		tel := NewTelemetry(nil, nil, TelemetryConfig{Sketches: true}, Sources{})
		for i := 0; i < 100; i++ {
			tel.Observe(Record{Model: "m", Class: "interactive", Outcome: "completed", Arrived: t0,
				FirstToken: t0.Add(time.Duration(1+i+100*dev) * time.Millisecond), Finished: t0.Add(time.Second)})
		}
		b, _ := json.Marshal(tel.Snapshot())
		var s Snapshot
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, s)
	}
	h, err := snaps[0].Requests[0].TTFT.Sketch.Histogram()
	if err != nil {
		t.Fatal(err)
	}
	o, err := snaps[1].Requests[0].TTFT.Sketch.Histogram()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Merge(o); err != nil {
		t.Fatal(err)
	}
	if p, _ := h.Quantile(0.99); p < 197 || p > 200 {
		t.Errorf("fleet ttft p99 %.2f ms, want ~198 (1..200 ms)", p)
	}
}
