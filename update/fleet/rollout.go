package fleet

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/update"
)

// RolloutSchema versions the retained rollout record.
const RolloutSchema = "edgeinfer.rollout/1"

// Rollout states.
const (
	RolloutRunning   = "running"
	RolloutPaused    = "paused"
	RolloutHalted    = "halted" // stopped itself: failures, or a wave missed its window
	RolloutAborted   = "aborted"
	RolloutCompleted = "completed"
)

// Rollout is one release going out to a set of devices in waves. It is
// plain data and lives, retained, on the broker
// (edgeinfer/v1/<fleet>/_fleet/rollout/<id>): whichever fleet serve
// instance leads reads it there, advances it and writes it back, so
// killing the instance that started it loses nothing.
//
// Waves are cumulative shares of the targets: 10,50,100 assigns the
// release to the first 10 %, then (once a wave succeeded) to half, then
// to all. The order of targets is a hash of rollout id and device name:
// stable across instances, spread across sites.
type Rollout struct {
	Schema  string `json:"schema"`
	ID      string `json:"id"`
	Model   string `json:"model"`
	Version string `json:"version"`
	// Selector picks the targets by label: "board", "version" (the active
	// version) and the device's own labels (site, line, ...). Empty: every
	// device that reported the model.
	Selector map[string]string `json:"selector,omitempty"`
	// Waves are cumulative percentages, increasing, the last 100.
	Waves []int `json:"waves"`
	// SuccessPercent of a wave's devices must run the release before the
	// next wave starts; 0 means 90.
	SuccessPercent int `json:"success_percent,omitempty"`
	// HaltPercent: the rollout halts itself once this share of the
	// assigned devices failed the health check, refused the release or
	// were rolled back; 0 means 10. At least one failure is needed.
	HaltPercent int `json:"halt_percent,omitempty"`
	// WindowMS is how long a wave may take to reach SuccessPercent before
	// the rollout halts; 0 means 10 minutes.
	WindowMS int64 `json:"window_ms,omitempty"`

	State   string    `json:"state"`
	Reason  string    `json:"reason,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Epoch is the leader's that wrote the record (leader.go): a view keeps
	// the record of the higher epoch. Zero: an operator's.
	Epoch       Epoch     `json:"epoch,omitzero"`
	Wave        int       `json:"wave"` // index into Waves of the current wave
	WaveStarted time.Time `json:"wave_started,omitzero"`
	// Targets are the devices selected when the rollout started, in wave
	// order; the first Assigned of them are assigned the release.
	Targets  []string `json:"targets"`
	Assigned int      `json:"assigned"`
	// RolledBack are targets rolled back by an operator: no longer
	// assigned the release, sent the rollback command.
	RolledBack []string `json:"rolled_back,omitempty"`
	// Control is the sequence number of the last control applied.
	Control int64 `json:"control,omitempty"`
	// Started is false until the leader has selected the targets.
	Started bool `json:"started"`

	// idx is the targets' positions in the order of their names, built on
	// first use: 4 bytes a target where a map was ~32 (fleet serve keeps
	// one per rollout for every device it targets).
	idx []int32
}

// targetIndex is device's position in Targets, or -1: a binary search of
// the index, so a pass over every device is O(devices log devices), not
// O(devices × targets). The passes that walk Targets know the position
// and do not search (stepAt). Whoever gives r new Targets clears idx.
func (r *Rollout) targetIndex(device string) int {
	if len(r.idx) != len(r.Targets) {
		r.idx = make([]int32, len(r.Targets))
		for i := range r.idx {
			r.idx[i] = int32(i)
		}
		// by name, then position: of a name given twice the first counts
		slices.SortStableFunc(r.idx, func(a, b int32) int { return strings.Compare(r.Targets[a], r.Targets[b]) })
	}
	k, ok := slices.BinarySearchFunc(r.idx, device, func(i int32, d string) int { return strings.Compare(r.Targets[i], d) })
	if !ok {
		return -1
	}
	return int(r.idx[k])
}

// Control is an operator's request for a rollout, retained on
// edgeinfer/v1/<fleet>/_fleet/control/<id> until the leader applies it:
// pause, resume, abort, or rollback of the devices matching Selector (or
// named in Devices) among the rollout's targets.
type Control struct {
	Seq      int64             `json:"seq"` // increasing; the CLI uses the time in ns
	Action   string            `json:"action"`
	Selector map[string]string `json:"selector,omitempty"`
	Devices  []string          `json:"devices,omitempty"`
}

// Control actions.
const (
	ActionPause    = "pause"
	ActionResume   = "resume"
	ActionAbort    = "abort"
	ActionRollback = "rollback"
)

// Validate refuses a control that would do nothing: an unknown action,
// or a rollback that names no device (by Devices or Selector). An
// operator's rollback of nobody used to be sent, applied and silently
// change nothing.
func (c Control) Validate() error {
	switch c.Action {
	case ActionPause, ActionResume, ActionAbort:
		return nil
	case ActionRollback:
		if len(c.Devices) == 0 && len(c.Selector) == 0 {
			return fmt.Errorf("%w: rollback of which devices? name them (--devices a,b) or select them by label (--select k=v)", ErrRollout)
		}
		return nil
	}
	return fmt.Errorf("%w: control action %q (want pause, resume, abort or rollback)", ErrRollout, c.Action)
}

// Validate checks a rollout as an operator wrote it.
func (r *Rollout) Validate() error {
	switch {
	case r.ID == "" || strings.ContainsAny(r.ID, "/+#"):
		return fmt.Errorf("%w: rollout id %q (one topic level)", ErrRollout, r.ID)
	case r.Model == "" || r.Version == "":
		return fmt.Errorf("%w: rollout %s: release NAME@VERSION required", ErrRollout, r.ID)
	case len(r.Waves) == 0 || r.Waves[len(r.Waves)-1] != 100:
		return fmt.Errorf("%w: rollout %s: waves %v must end at 100", ErrRollout, r.ID, r.Waves)
	case r.SuccessPercent < 0 || r.SuccessPercent > 100 || r.HaltPercent < 0 || r.HaltPercent > 100 || r.WindowMS < 0:
		return fmt.Errorf("%w: rollout %s: percentages 0-100 and a window >= 0", ErrRollout, r.ID)
	}
	for i, w := range r.Waves {
		if w <= 0 || w > 100 || (i > 0 && w <= r.Waves[i-1]) {
			return fmt.Errorf("%w: rollout %s: waves %v must increase from above 0 to 100", ErrRollout, r.ID, r.Waves)
		}
	}
	return nil
}

func (r *Rollout) successPercent() int { return cmp.Or(r.SuccessPercent, 90) }
func (r *Rollout) haltPercent() int    { return cmp.Or(r.HaltPercent, 10) }
func (r *Rollout) window() time.Duration {
	return time.Duration(cmp.Or(r.WindowMS, int64(10*time.Minute/time.Millisecond))) * time.Millisecond
}

// Done says the rollout will not change by itself any more.
func (r *Rollout) Done() bool {
	return r.State == RolloutCompleted || r.State == RolloutAborted || r.State == RolloutHalted
}

// Step is where a device stands in a rollout.
type Step string

// Steps of a device in a rollout.
const (
	StepWaiting    Step = "waiting"  // a target not assigned yet
	StepAssigned   Step = "assigned" // assigned, not running it yet
	StepUpdating   Step = "updating" // downloading, staged or checking it
	StepUpdated    Step = "updated"  // runs the release
	StepFailed     Step = "failed"   // health check failed (stays on its version)
	StepRefused    Step = "refused"  // the device refused the release
	StepRolledBack Step = "rolled_back"
)

// DeviceStep says where device stands in r, judged from its state.
func (r *Rollout) DeviceStep(device string, d *Device) Step {
	return r.stepAt(r.targetIndex(device), device, d)
}

// stepAt is DeviceStep of the target at position i (-1: not a target).
func (r *Rollout) stepAt(i int, device string, d *Device) Step {
	if i < 0 {
		return ""
	}
	if slices.Contains(r.RolledBack, device) {
		return StepRolledBack
	}
	if i >= r.Assigned {
		return StepWaiting
	}
	if d == nil || d.Update == nil {
		return StepAssigned
	}
	u := d.Update
	switch {
	case u.Active == r.Version:
		return StepUpdated
	case u.Version == r.Version && u.Phase == update.PhaseFailed:
		return StepFailed
	case u.LastEvent == string(update.EventRefused) && u.Active != r.Version && u.RefusedVersion == "" &&
		u.Version != r.Version && checkedBefore(d, r.WaveStarted):
		// A refusal that named no release, from a check that ended before
		// this wave was assigned (metadata caught mid-publish, say): the
		// check the assignment's nudge starts decides.
		return StepAssigned
	case u.Version == r.Version && u.Phase == update.PhaseRefused,
		u.LastEvent == string(update.EventRefused) && u.Active != r.Version && (u.RefusedVersion == "" || u.RefusedVersion == r.Version):
		// A refusal of another release (one from before this rollout:
		// the device's retained state keeps its last event) says nothing
		// of this one; one that named no release (metadata the device
		// cannot trust) stops every release.
		return StepRefused
	case u.Version == r.Version && u.Phase == update.PhaseRolledBack:
		return StepRolledBack
	case u.Version == r.Version && u.Phase.InProgress():
		return StepUpdating
	}
	return StepAssigned
}

// checkedBefore says whether the device's last check (its own clock)
// ended before t; a state that does not say counts as after.
func checkedBefore(d *Device, t time.Time) bool {
	if t.IsZero() {
		return false
	}
	if d.checked != 0 { // a view's record (record.fill)
		return time.Unix(0, d.checked).Before(t)
	}
	at, err := time.Parse(time.RFC3339Nano, d.Update.Checked)
	return err == nil && at.Before(t)
}

// deviceSet is what a rollout decision reads of the fleet: a map of
// devices, or a view's records read in place (View.decide), where the
// Device a call returns stays valid only until the next call.
type deviceSet interface {
	get(id string) *Device
	each(f func(id string, d *Device))
}

// deviceMap is a deviceSet of whole devices.
type deviceMap map[string]*Device

func (m deviceMap) get(id string) *Device { return m[id] }
func (m deviceMap) each(f func(string, *Device)) {
	for id, d := range m {
		f(id, d)
	}
}

// Counts tallies the targets' steps.
func (r *Rollout) Counts(devices map[string]*Device) map[Step]int {
	return r.counts(deviceMap(devices))
}

func (r *Rollout) counts(devices deviceSet) map[Step]int {
	c := map[Step]int{}
	for i, id := range r.Targets {
		c[r.stepAt(i, id, devices.get(id))]++
	}
	return c
}

// Matches says whether a device's labels satisfy sel.
func Matches(sel map[string]string, d *Device, model string) bool {
	if d == nil || d.Update == nil || d.Update.Model != model {
		return false
	}
	for k, v := range sel {
		var have string
		switch k {
		case "board":
			have = d.Board()
		case "version":
			have = d.Update.Active
		case "device":
			have = d.ID
		default:
			have = d.Update.Labels[k]
		}
		if have != v {
			return false
		}
	}
	return true
}

// Advance is the rollout's decision, a pure function of the rollout, the
// devices' reported state and the time: select the targets (once), halt
// on failures or a missed window, advance to the next wave, complete. It
// returns whether r changed. Any instance computing it from the same
// retained state decides the same.
func (r *Rollout) Advance(devices map[string]*Device, now time.Time) bool {
	return r.advance(deviceMap(devices), now)
}

func (r *Rollout) advance(devices deviceSet, now time.Time) bool {
	if r.State != RolloutRunning {
		return false
	}
	changed := false
	if !r.Started {
		r.Targets, r.idx = selectTargets(r.ID, r.Model, r.Selector, devices), nil
		r.Started, r.Wave, r.WaveStarted, changed = true, 0, now, true
		if len(r.Targets) == 0 {
			r.State, r.Reason, r.Updated = RolloutHalted, "no device matches the selector", now
			return true
		}
		r.Assigned = waveSize(r.Waves[0], len(r.Targets))
	}
	c := r.counts(devices)
	assigned := r.Assigned - countAssignedRolledBack(r)
	failures := c[StepFailed] + c[StepRefused]
	if failures > 0 && failures*100 >= r.haltPercent()*max(assigned, 1) {
		r.State, r.Updated = RolloutHalted, now
		r.Reason = fmt.Sprintf("wave %d: %d of %d assigned devices failed or refused (halt at %d %%)", r.Wave+1, failures, assigned, r.haltPercent())
		return true
	}
	if c[StepUpdated]*100 >= r.successPercent()*max(assigned, 1) {
		if r.Wave == len(r.Waves)-1 {
			r.State, r.Updated = RolloutCompleted, now
			r.Reason = fmt.Sprintf("%d of %d targets run %s", c[StepUpdated], len(r.Targets), r.Version)
			return true
		}
		r.Wave++
		r.WaveStarted, r.Updated = now, now
		r.Assigned = max(r.Assigned, waveSize(r.Waves[r.Wave], len(r.Targets)))
		return true
	}
	if now.Sub(r.WaveStarted) > r.window() {
		r.State, r.Updated = RolloutHalted, now
		r.Reason = fmt.Sprintf("wave %d: %d of %d devices updated within %v (%d %% required)", r.Wave+1, c[StepUpdated], assigned, r.window(), r.successPercent())
		return true
	}
	if changed {
		r.Updated = now
	}
	return changed
}

func countAssignedRolledBack(r *Rollout) int {
	n := 0
	for _, d := range r.RolledBack {
		if i := r.targetIndex(d); i >= 0 && i < r.Assigned {
			n++
		}
	}
	return n
}

func waveSize(percent, n int) int { return max(1, (percent*n+99)/100) }

// selectTargets orders the matching devices: online ones first, each
// group by a hash of rollout id and device name.
func selectTargets(id, model string, sel map[string]string, devices deviceSet) []string {
	// Online devices first: a canary that is away would hold its wave
	// for the whole window. Offline targets come last and catch up when
	// they return.
	type target struct {
		name string
		key  [33]byte // offline, then the hash
	}
	var ts []target
	devices.each(func(name string, d *Device) {
		if Matches(sel, d, model) {
			t := target{name: name}
			if !d.Online() {
				t.key[0] = 1
			}
			h := sha256.Sum256([]byte(id + "\x00" + name))
			copy(t.key[1:], h[:])
			ts = append(ts, t)
		}
	})
	slices.SortFunc(ts, func(a, b target) int { return bytes.Compare(a.key[:], b.key[:]) })
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.name
	}
	return ids
}

// Apply applies an operator's control; it returns the devices to send the
// rollback command to.
func (r *Rollout) Apply(c Control, devices map[string]*Device, now time.Time) (rollback []string, err error) {
	return r.apply(c, deviceMap(devices), now)
}

func (r *Rollout) apply(c Control, devices deviceSet, now time.Time) (rollback []string, err error) {
	if c.Seq <= r.Control {
		return nil, nil
	}
	r.Control, r.Updated = c.Seq, now
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Action {
	case ActionPause:
		if r.State == RolloutRunning {
			r.State, r.Reason = RolloutPaused, "paused by an operator"
		}
	case ActionResume:
		if r.State == RolloutPaused || r.State == RolloutHalted {
			r.State, r.Reason = RolloutRunning, "resumed by an operator"
			r.WaveStarted = now
		}
	case ActionAbort:
		if !r.Done() || r.State == RolloutHalted {
			r.State, r.Reason = RolloutAborted, "aborted by an operator"
		}
	case ActionRollback:
		for _, id := range r.Targets[:r.Assigned] {
			if slices.Contains(r.RolledBack, id) || !(slices.Contains(c.Devices, id) || (len(c.Selector) > 0 && Matches(c.Selector, devices.get(id), r.Model))) {
				continue
			}
			// Every one gets the command, naming the release: a device
			// that activated it after its last report must leave it too,
			// and one that never ran it stays where it is and checks
			// (update/rollout), following the director, which assigns it
			// the release no longer.
			r.RolledBack = append(r.RolledBack, id)
			rollback = append(rollback, id)
		}
		if r.State == RolloutRunning {
			r.State, r.Reason = RolloutPaused, fmt.Sprintf("paused: %d devices rolled back by an operator", len(rollback))
		}
	}
	return rollback, nil
}

// Assignments computes the director's assignments for model from every
// rollout of it: version -> devices. A running, paused or completed
// rollout assigns its release to its assigned targets; a halted or
// aborted one only to those already running it (so nobody else starts);
// rolled-back devices are never assigned it.
func Assignments(model string, rollouts []*Rollout, devices map[string]*Device) map[string][]string {
	return assignments(model, rollouts, deviceMap(devices))
}

func assignments(model string, rollouts []*Rollout, devices deviceSet) map[string][]string {
	out := map[string][]string{}
	for _, r := range rollouts {
		if r.Model != model || !r.Started {
			continue
		}
		if out[r.Version] == nil {
			out[r.Version] = make([]string, 0, r.Assigned) // not grown a quarter at a time
		}
		for _, id := range r.Targets[:r.Assigned] {
			if slices.Contains(r.RolledBack, id) {
				continue
			}
			if r.State == RolloutHalted || r.State == RolloutAborted {
				if d := devices.get(id); d == nil || d.Update == nil || d.Update.Active != r.Version {
					continue
				}
			}
			out[r.Version] = append(out[r.Version], id)
		}
	}
	for v := range out {
		if len(out[v]) == 0 {
			delete(out, v)
			continue
		}
		slices.Sort(out[v])
		out[v] = slices.Compact(out[v])
	}
	return out
}

// ParseRollout decodes a retained rollout record (an MQTT payload: any
// client allowed to publish under _fleet/ can write one, so it is checked).
func ParseRollout(b []byte) (*Rollout, error) {
	if len(b) > maxRecord {
		return nil, fmt.Errorf("%w: rollout record of %d bytes", ErrRollout, len(b))
	}
	var r Rollout
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRollout, err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if r.Assigned < 0 || r.Assigned > len(r.Targets) || r.Wave < 0 || r.Wave >= len(r.Waves) {
		return nil, fmt.Errorf("%w: rollout %s: assigned %d of %d targets, wave %d", ErrRollout, r.ID, r.Assigned, len(r.Targets), r.Wave)
	}
	switch r.State {
	case RolloutRunning, RolloutPaused, RolloutHalted, RolloutAborted, RolloutCompleted:
	default:
		return nil, fmt.Errorf("%w: rollout %s: state %q", ErrRollout, r.ID, r.State)
	}
	return &r, nil
}

// maxRecord bounds a retained fleet record (rollout, control, state): a
// million-device target list would not fit, see SCALE.md.
const maxRecord = 16 << 20
