package fleet

import (
	"fmt"
	"github.com/edgeinfer/edgeinfer/update/wire"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/update"
)

func simDevices(n int) map[string]*Device {
	out := map[string]*Device{}
	for i := range n {
		id := fmt.Sprintf("d%02d", i)
		out[id] = &Device{ID: id, Status: &link.Status{State: "online"},
			Update: &wire.State{Schema: wire.StateSchema, Device: id, Model: "m", Active: "1", Labels: map[string]string{"site": fmt.Sprint(i % 2)}}}
	}
	return out
}

// TestAdvance walks the decisions on synthetic states: waves advance when
// enough devices run the release, a failure past the threshold halts, and a
// wave that misses its window halts.
func TestAdvance(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	devs := simDevices(20)
	r := &Rollout{ID: "r", Model: "m", Version: "2", Waves: []int{10, 50, 100}, State: RolloutRunning, SuccessPercent: 100, WindowMS: 60000}
	if !r.Advance(devs, t0) || r.Assigned != 2 || len(r.Targets) != 20 {
		t.Fatalf("start: assigned %d of %d", r.Assigned, len(r.Targets))
	}
	if r.Advance(devs, t0.Add(time.Second)) {
		t.Fatal("advanced with nobody updated")
	}
	for _, id := range r.Targets[:2] {
		devs[id].Update.Active = "2"
	}
	if !r.Advance(devs, t0.Add(2*time.Second)) || r.Wave != 1 || r.Assigned != 10 {
		t.Fatalf("after the canaries: wave %d, assigned %d", r.Wave, r.Assigned)
	}
	if a := Assignments("m", []*Rollout{r}, devs); len(a["2"]) != 10 {
		t.Fatalf("assignments %v", a)
	}
	// One of the wave fails its check: 1 of 10 is at the 10 % threshold.
	bad := r.Targets[5]
	devs[bad].Update.Phase, devs[bad].Update.Version = update.PhaseFailed, "2"
	if !r.Advance(devs, t0.Add(3*time.Second)) || r.State != RolloutHalted {
		t.Fatalf("state %s after a failure (%s)", r.State, r.Reason)
	}
	// Halted: only devices already running it stay assigned.
	if a := Assignments("m", []*Rollout{r}, devs); len(a["2"]) != 2 {
		t.Fatalf("assignments of a halted rollout %v", a)
	}
	// Resume, then the window runs out.
	if _, err := r.Apply(Control{Seq: 1, Action: "resume"}, devs, t0.Add(4*time.Second)); err != nil || r.State != RolloutRunning {
		t.Fatalf("resume: %v, %s", err, r.State)
	}
	devs[bad].Update.Phase = update.PhaseActive
	devs[bad].Update.Active = "1"
	r.HaltPercent = 100
	if r.Advance(devs, t0.Add(30*time.Second)); r.State != RolloutRunning {
		t.Fatalf("halted early: %s", r.Reason)
	}
	if !r.Advance(devs, t0.Add(2*time.Minute)) || r.State != RolloutHalted {
		t.Fatalf("window: %s (%s)", r.State, r.Reason)
	}
	// A rollback of a segment unassigns it.
	rb, err := r.Apply(Control{Seq: 2, Action: "rollback", Selector: map[string]string{"site": "0"}}, devs, t0.Add(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Every selected target gets the command (naming the release: a
	// device not running it checks instead), and no other device.
	want := 0
	for _, id := range r.Targets[:r.Assigned] {
		if devs[id].Update.Labels["site"] == "0" {
			want++
		}
	}
	for _, id := range rb {
		if devs[id].Update.Labels["site"] != "0" {
			t.Fatalf("rollback sent to %s, not in the segment", id)
		}
	}
	if len(rb) != want {
		t.Fatalf("rollback sent to %d devices, want the segment's %d", len(rb), want)
	}
	if _, err := r.Apply(Control{Seq: 3, Action: "explode"}, devs, t0); err == nil {
		t.Fatal("unknown action accepted")
	}
}

// FuzzIngest: whatever a client publishes where the fleet listens, Ingest
// returns (an error or nothing) and never panics; a rollout record it
// accepts is valid.
func FuzzIngest(f *testing.F) {
	f.Add("edgeinfer/v1/f/d1/update", []byte(`{"schema":"edgeinfer.update-state/1","device":"d1","model":"m","active":"1"}`))
	f.Add("edgeinfer/v1/f/d1/status", []byte(`{"schema":"edgeinfer.status/1","state":"online","board":"x"}`))
	f.Add("edgeinfer/v1/f/d1/telemetry", []byte(`{"schema":"edgeinfer.telemetry/1","requests":[{"ttft_ms":{"p99":3}}]}`))
	f.Add("edgeinfer/v1/f/_fleet/rollout/r", []byte(`{"id":"r","model":"m","version":"2","waves":[10,100],"state":"running","targets":["a"],"assigned":2}`))
	f.Add("edgeinfer/v1/f/_fleet/control/r", []byte(`{"seq":1,"action":"pause"}`))
	f.Add("edgeinfer/v1/f/_serve-a/status", []byte(`{"state":"online"}`))
	f.Add("edgeinfer/v1/f/_fleet/leader/claim", []byte(`{"epoch":{"counter":3,"instance":"a"},"held":true}`))
	f.Add("edgeinfer/v1/f/d1/update", []byte(`{"schema":"edgeinfer.update-state/1","device":"d1","model":"m","labels":{"site":"s1","line":"2"},"phase":"active"}`))
	f.Fuzz(func(t *testing.T, topic string, payload []byte) {
		v := NewView("f")
		_ = v.Ingest(topic, payload, time.Now())
		for _, r := range v.Rollouts() {
			if err := r.Validate(); err != nil || r.Assigned > len(r.Targets) || r.Wave >= len(r.Waves) {
				t.Fatalf("accepted rollout %+v: %v", r, err)
			}
			r.Advance(v.Devices(), time.Now())
			_ = Assignments(r.Model, []*Rollout{r}, v.Devices())
		}
		_ = Report(v, time.Now())
	})
}

// TestStaleRefusal: a device whose last event refused another release (a
// refusal from before the rollout, kept in its retained state) is
// assigned, not counted as refusing this release; a refusal of this
// release, or of metadata before any release was chosen, still counts.
func TestStaleRefusal(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	devs := simDevices(1)
	u := devs["d00"].Update
	u.LastEvent, u.Refused, u.RefusedVersion = string(update.EventRefused), "rollback: m@1 has counter 1", "1"
	r := &Rollout{ID: "r3", Model: "m", Version: "3", Waves: []int{100}, State: RolloutRunning}
	r.Advance(devs, t0)
	if r.State != RolloutRunning || r.DeviceStep("d00", devs["d00"]) != StepAssigned {
		t.Fatalf("a refusal of 1 counted against the rollout of 3: %s, step %s (%s)", r.State, r.DeviceStep("d00", devs["d00"]), r.Reason)
	}
	for _, v := range []string{"3", ""} {
		u.RefusedVersion = v
		if s := r.DeviceStep("d00", devs["d00"]); s != StepRefused {
			t.Errorf("refused version %q: step %s, want refused", v, s)
		}
	}
	// A refusal that named no release, from a check before the wave was
	// assigned, waits for the next check; one after it counts.
	r.WaveStarted = t0
	u.RefusedVersion, u.Checked = "", t0.Add(-time.Second).Format(time.RFC3339Nano)
	if s := r.DeviceStep("d00", devs["d00"]); s != StepAssigned {
		t.Errorf("a refusal from a check before the wave: step %s, want assigned", s)
	}
	u.Checked = t0.Add(time.Second).Format(time.RFC3339Nano)
	if s := r.DeviceStep("d00", devs["d00"]); s != StepRefused {
		t.Errorf("a refusal from a check after the wave started: step %s, want refused", s)
	}
}
