package fleet

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/wire"
)

// viewRecords are device i's retained status and update state, as a
// device publishes them after an update: its times to the nanosecond,
// no two devices' the same.
func viewRecords(i int) (status, state []byte) {
	id := fmt.Sprintf("dev-%06d", i)
	at := time.Date(2026, 12, 3, 19, 0, i%60, 1000*i+7, time.UTC).Format(time.RFC3339Nano)
	status, _ = json.Marshal(link.Status{Schema: link.StatusSchema, State: "online", Fleet: "f", Device: id, Time: at,
		Birth: &link.Birth{SDKVersion: update.SDKVersion, Board: "rk3588", Models: []link.ModelVersion{{Name: "m", Active: "2", Previous: "1"}}}})
	state, _ = json.Marshal(wire.State{Schema: wire.StateSchema, Seq: 7, Fleet: "f", Device: id, Board: "rk3588",
		Labels: map[string]string{"site": "s" + strconv.Itoa(i%40), "line": "l" + strconv.Itoa(i%4)}, Model: "m", Active: "2", Previous: "1",
		Installed: 2, Phase: update.PhaseActive, Version: "2", Counter: 2, LastEvent: "active", Checked: at, Time: at})
	return status, state
}

// viewOf is a view of n devices' retained records (viewRecords).
func viewOf(t *testing.T, n int) *View {
	t.Helper()
	v := NewView("f")
	now := time.Now()
	for i := range n {
		status, state := viewRecords(i)
		id := fmt.Sprintf("dev-%06d", i)
		if err := v.Ingest("edgeinfer/v1/f/"+id+"/status", status, now); err != nil {
			t.Fatal(err)
		}
		if err := v.Ingest("edgeinfer/v1/f/"+id+"/update", state, now); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// heapPerDevice is the live heap a view holding n devices takes, per
// device.
func heapPerDevice(t *testing.T, n int) float64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := viewOf(t, n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// TestViewMemoryPerDevice: the view's record of a device (retained status
// and update state, the fleet's own copy) is compact: at most 300 bytes
// of live heap a device (1,200 before the view shared what devices have
// in common, 524 before records held their strings as symbols), so that
// fleet serve at 100,000 devices holds its view in about 25 MB.
// EDGEINFER_VIEW_DEVICES sets the count (20,000).
func TestViewMemoryPerDevice(t *testing.T) {
	n := 20000
	if v, _ := strconv.Atoi(os.Getenv("EDGEINFER_VIEW_DEVICES")); v > 0 {
		n = v
	}
	per := heapPerDevice(t, n)
	t.Logf("%d devices: %.0f bytes of live heap a device", n, per)
	if per > 300 {
		t.Errorf("%.0f bytes of live heap a device in the view, want <= 300", per)
	}
}

// TestLeadPassMemory: a leader pass reads the view in place. Before, it
// copied every device's record and every target list once a pass (255
// bytes a device of garbage each second, live while the pass ran, which
// with the view's own records set fleet serve's peak); now what it
// allocates is the assignment and nudge lists: at most 100 bytes a
// device. EDGEINFER_VIEW_DEVICES sets the count (20,000).
func TestLeadPassMemory(t *testing.T) {
	n := 20000
	if v, _ := strconv.Atoi(os.Getenv("EDGEINFER_VIEW_DEVICES")); v > 0 {
		n = v
	}
	v, now := viewOf(t, n), time.Now()
	// Every device assigned release 3, none running it yet: the pass
	// counts, assigns and nudges them all.
	r := &Rollout{Schema: RolloutSchema, ID: "r3", Model: "m", Version: "3", Waves: []int{100}, State: RolloutRunning, WindowMS: 3600e3}
	s := &Server{view: v, nudged: map[string]int64{}}
	p := s.plan(now)
	if len(p.changed) != 0 {
		t.Fatalf("a pass over no rollout changed %d", len(p.changed))
	}
	v.put(r)
	p = s.plan(now) // selects the targets
	if len(p.changed) != 1 || p.changed[0].Assigned != n {
		t.Fatalf("the first pass: %d changed, want the rollout with all %d assigned", len(p.changed), n)
	}
	v.put(p.changed[0])
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p = s.plan(now.Add(time.Second))
	runtime.ReadMemStats(&after)
	if len(p.nudge) != n || len(p.wants["m"]["3"]) != n {
		t.Fatalf("the pass nudges %d and assigns %d devices, want %d", len(p.nudge), len(p.wants["m"]["3"]), n)
	}
	per := float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
	t.Logf("%d devices: a leader pass allocates %.0f bytes a device", n, per)
	if per > 100 {
		t.Errorf("a leader pass allocates %.0f bytes a device, want <= 100 (it reads the view in place)", per)
	}
}

// TestViewKeepsWhatDevicesSaid: a compact record gives back the status and
// update state a device published, field for field; a cleared device is
// forgotten, and so are the strings only it used.
func TestViewKeepsWhatDevicesSaid(t *testing.T) {
	v := NewView("f")
	now := time.Date(2026, 12, 3, 19, 0, 0, 0, time.UTC)
	const n = 50
	for i := range n {
		status, state := viewRecords(i)
		id := fmt.Sprintf("dev-%06d", i)
		if i%7 == 0 { // a string no other device uses
			var s wire.State
			_ = json.Unmarshal(state, &s)
			s.Reason, s.Refused, s.Phase = "disk full on "+id, "tiny/9: "+id, update.PhaseFailed
			if i%14 == 0 { // times not in UTC, and one not a time: kept as they came
				s.Checked, s.Time = "2026-12-03T20:00:01.5+01:00", "yesterday"
			}
			state, _ = json.Marshal(s)
		}
		for _, m := range []struct {
			kind string
			b    []byte
		}{{"status", status}, {"update", state}} {
			if err := v.Ingest("edgeinfer/v1/f/"+id+"/"+m.kind, m.b, now); err != nil {
				t.Fatal(err)
			}
		}
		got := v.Device(id)
		if b, _ := json.Marshal(got.Status); string(b) != string(status) {
			t.Fatalf("%s status:\n got %s\nwant %s", id, b, status)
		}
		if b, _ := json.Marshal(got.Update); string(b) != string(state) {
			t.Fatalf("%s update state:\n got %s\nwant %s", id, b, state)
		}
		if !got.LastSeen.Equal(now) {
			t.Fatalf("%s last seen %v, want %v", id, got.LastSeen, now)
		}
	}
	tel, _ := json.Marshal(link.Snapshot{Schema: link.TelemetrySchema, Time: "2026-12-03T19:00:05Z"})
	if err := v.Ingest("edgeinfer/v1/f/dev-000001/telemetry", tel, now); err != nil {
		t.Fatal(err)
	}
	if p := v.Device("dev-000001").Perf; p == nil || p.Time != "2026-12-03T19:00:05Z" || p.TTFTP99MS != nil {
		t.Fatalf("telemetry: %+v", p)
	}
	for i := 0; i < n; i += 7 {
		id := fmt.Sprintf("dev-%06d", i)
		for _, kind := range []string{"status", "update"} {
			if err := v.Ingest("edgeinfer/v1/f/"+id+"/"+kind, nil, now); err != nil {
				t.Fatal(err)
			}
		}
		if v.Device(id) != nil {
			t.Fatalf("%s: cleared, still in the view", id)
		}
	}
	if v.Len() != n-(n+6)/7 {
		t.Fatalf("%d devices after clearing %d of %d", v.Len(), (n+6)/7, n)
	}
	for s := range v.tb.syms.idx {
		if strings.Contains(s, "disk full") || strings.Contains(s, "tiny/9") {
			t.Fatalf("%q: a cleared device's own string is kept", s)
		}
	}
	for i := range n {
		id := fmt.Sprintf("dev-%06d", i)
		for _, kind := range []string{"status", "update", "telemetry"} {
			_ = v.Ingest("edgeinfer/v1/f/"+id+"/"+kind, nil, now)
		}
	}
	if v.Len() != 1 || v.Device("dev-000001").Perf == nil {
		t.Fatalf("%d devices after clearing every status and state, want the one with telemetry", v.Len())
	}
	if got := v.tb.syms.Len(); got != 0 || len(v.tb.odd) != 0 {
		t.Fatalf("%d strings and %d odd times kept for one telemetry record, want none", got, len(v.tb.odd))
	}
}
