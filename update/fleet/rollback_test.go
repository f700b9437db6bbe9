package fleet_test

import (
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// TestRollbackRestartThenRollout is the newcomer's sequence that stranded
// a device: 1 and 2 rolled out, the operator rolls one device back, its
// agent restarts and checks, and the next rollout reaches it and
// activates: the director's assignment of the release it was rolled back
// to is not refused as an attack, and nothing of that counts against the
// next rollout.
func TestRollbackRestartThenRollout(t *testing.T) {
	e := newSimEnv(t, 2)
	e.install1()
	e.publish(nil, "2", "model.layers.1.", false)
	if r, _ := e.rollout(fleet.Rollout{ID: "r2", Model: model, Version: "2", Waves: []int{100}, SuccessPercent: 100}, 3*time.Minute); r.State != fleet.RolloutCompleted {
		t.Fatalf("rollout of 2: %s (%s)", r.State, r.Reason)
	}
	const i = 0
	dev := e.fleet.Devices[i].ID
	if err := e.op.Control(e.ctx, "r2", fleet.Control{Action: "rollback", Devices: []string{dev}}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(dev+" rolled back to 1", time.Minute, func() bool { return e.fleet.Devices[i].Active() == "1" })

	if err := e.fleet.Devices[i].Close(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if err := e.fleet.Restart(e.ctx, i); err != nil {
		t.Fatal(err)
	}
	// The check a restart runs, as the fleet sees it.
	st := func() *fleet.Device { return e.op.View().Devices()[dev] }
	e.waitFor(dev+" checked after its restart", time.Minute, func() bool {
		d := st()
		if d == nil || d.Update == nil || d.Update.Checked == "" {
			return false
		}
		at, err := time.Parse(time.RFC3339Nano, d.Update.Checked)
		return err == nil && at.After(restarted)
	})
	if u := st().Update; u.LastEvent == string(update.EventRefused) || u.Active != "1" {
		t.Fatalf("after rollback and restart: active %s, last event %s: %s", u.Active, u.LastEvent, u.Refused)
	}

	e.publish(nil, "3", "model.layers.0.", false)
	r, _ := e.rollout(fleet.Rollout{ID: "r3", Model: model, Version: "3", Waves: []int{100}, SuccessPercent: 100}, 3*time.Minute)
	if r.State != fleet.RolloutCompleted {
		t.Fatalf("rollout of 3 after the rollback and restart: %s (%s)", r.State, r.Reason)
	}
	if v := e.fleet.Versions(); v["3"] != 2 {
		t.Fatalf("versions after the rollout of 3: %v", v)
	}
}
