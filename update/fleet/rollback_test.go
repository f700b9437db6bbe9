package fleet_test

import (
	"slices"
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
		e.dump()
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

// TestRollbackOfDeviceNotOnRelease: an operator rolls back from 3 a
// device that never took 3 (it was away); the command names the release,
// and the device, still on 2, stays on 2 instead of going back to 1.
func TestRollbackOfDeviceNotOnRelease(t *testing.T) {
	e := newSimEnv(t, 2)
	e.install1()
	e.publish(nil, "2", "model.layers.1.", false)
	if r, _ := e.rollout(fleet.Rollout{ID: "r2", Model: model, Version: "2", Waves: []int{100}, SuccessPercent: 100}, 3*time.Minute); r.State != fleet.RolloutCompleted {
		t.Fatalf("rollout of 2: %s (%s)", r.State, r.Reason)
	}
	const away = 1
	dev := e.fleet.Devices[away].ID
	if err := e.fleet.Devices[away].Close(); err != nil {
		t.Fatal(err)
	}
	e.publish(nil, "3", "model.layers.0.", false)
	if r, _ := e.rollout(fleet.Rollout{ID: "r3", Model: model, Version: "3", Waves: []int{100}, SuccessPercent: 50}, 3*time.Minute); r.State != fleet.RolloutCompleted {
		t.Fatalf("rollout of 3: %s (%s)", r.State, r.Reason)
	}
	if err := e.op.Control(e.ctx, "r3", fleet.Control{Action: fleet.ActionRollback, Devices: []string{dev}}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the rollback recorded", time.Minute, func() bool {
		r := e.op.View().Rollout("r3")
		return r != nil && slices.Contains(r.RolledBack, dev)
	})
	restarted := time.Now()
	if err := e.fleet.Restart(e.ctx, away); err != nil {
		t.Fatal(err)
	}
	// Back, it checks on connecting, and once more for the rollback
	// command its session kept (a device not on 3 checks instead); a
	// device that obeyed the command blindly would be on 1.
	checks := map[string]bool{}
	e.waitFor(dev+" checked twice after its restart", time.Minute, func() bool {
		d := e.op.View().Devices()[dev]
		if d == nil || d.Update == nil {
			return false
		}
		if at, err := time.Parse(time.RFC3339Nano, d.Update.Checked); err == nil && at.After(restarted) {
			checks[d.Update.Checked] = true
		}
		return len(checks) >= 2 || d.Update.Active == "1"
	})
	if got := e.fleet.Devices[away].Active(); got != "2" {
		t.Fatalf("a device on 2 rolled back from 3, which it never ran: now on %q, want 2", got)
	}
}
