package update_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// assign makes the director's assignments of m exactly byVersion, as the
// leading fleet serve instance signs them.
func (e *env) assign(t *testing.T, byVersion map[string][]string) {
	t.Helper()
	if _, err := e.repo.SetAssignments("m", byVersion); err != nil {
		t.Fatal(err)
	}
}

// onTwo is a device with a director that took releases 1 and 2 of m, in
// turn: the start of every operator rollback.
func onTwo(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, fleet.InitOptions{Director: true})
	e.publish("1", layers(1), fleet.ReleaseOptions{})
	e.publish("2", layers(2), fleet.ReleaseOptions{})
	e.assign(t, map[string][]string{"1": {"dev-1"}})
	e.applyOK(t, "1")
	e.assign(t, map[string][]string{"1": {"dev-1"}, "2": {"dev-1"}})
	e.applyOK(t, "2")
	return e
}

// TestOperatorRollbackThenRestart is the sequence that stranded a device:
// 1 and 2 rolled out, the operator rolls the device back (the director
// stops assigning 2 to it and the device is sent the rollback command),
// the agent restarts and checks, and 3 is rolled out. The director's
// assignment of the older release is a signed decision: the check after
// the restart finds the device up to date, not under attack, and 3 (a
// higher counter) installs.
func TestOperatorRollbackThenRestart(t *testing.T) {
	e := onTwo(t)

	e.assign(t, map[string][]string{"1": {"dev-1"}}) // signed before the command is sent
	if ref, err := e.agent().Rollback(e.ctx); err != nil || ref.Version != "1" {
		t.Fatalf("rollback = %v, %v", ref, err)
	}
	restarted := e.agent()
	if _, err := restarted.Apply(e.ctx); !errors.Is(err, update.ErrNoUpdate) || errors.Is(err, update.ErrRefused) {
		t.Fatalf("check after rollback and restart: %v; want up to date on 1", err)
	}
	if ev, ok := e.events.last(update.EventRefused); ok {
		t.Fatalf("refused after an operator's rollback: %s", ev.Reason)
	}
	if st, err := restarted.Status(e.ctx); err != nil || st.Active != "1" || st.Installed != e.counter(t, "1") {
		t.Fatalf("status after rollback %+v, %v; want active 1 with its counter", st, err)
	}

	e.publish("3", layers(3), fleet.ReleaseOptions{})
	e.assign(t, map[string][]string{"1": {"dev-1"}, "3": {"dev-1"}})
	e.applyOK(t, "3")
}

// TestDirectorAssignsOlderRelease: a device whose director now assigns
// only an older release (its rollback command lost, or a rollback the
// fleet decided while it was away) installs that release, and a later
// release with a higher counter still installs after it.
func TestDirectorAssignsOlderRelease(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{Director: true})
	e.publish("1", layers(1), fleet.ReleaseOptions{})
	e.publish("2", layers(2), fleet.ReleaseOptions{})
	e.assign(t, map[string][]string{"1": {"dev-1"}})
	e.applyOK(t, "1")
	e.assign(t, map[string][]string{"2": {"dev-1"}})
	e.applyOK(t, "2")
	e.assign(t, map[string][]string{"1": {"dev-1"}})
	e.applyOK(t, "1")
	if _, err := e.agent().Apply(e.ctx); !errors.Is(err, update.ErrNoUpdate) {
		t.Fatalf("after the director's rollback: %v; want up to date", err)
	}
	e.publish("3", layers(3), fleet.ReleaseOptions{})
	e.assign(t, map[string][]string{"3": {"dev-1"}})
	e.applyOK(t, "3")
}

// TestRollbackThenNewerRelease (no director): the release rolled back
// from is not installed again, a newer one is.
func TestRollbackThenNewerRelease(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{})
	e.publish("1", layers(1), fleet.ReleaseOptions{})
	e.applyOK(t, "1")
	e.publish("2", layers(2), fleet.ReleaseOptions{})
	e.applyOK(t, "2")
	if ref, err := e.agent().Rollback(e.ctx); err != nil || ref.Version != "1" {
		t.Fatalf("rollback = %v, %v", ref, err)
	}
	if _, err := e.agent().Apply(e.ctx); !errors.Is(err, update.ErrNoUpdate) || e.active() != "1" {
		t.Fatalf("after the rollback: %v, active %q; want 2 left alone", err, e.active())
	}
	e.publish("3", layers(3), fleet.ReleaseOptions{})
	e.applyOK(t, "3")
}

// counter is the signed counter of m@version.
func (e *env) counter(t *testing.T, version string) uint64 {
	t.Helper()
	rel, ok := e.repo.Releases()[update.TargetPath("m", version)]
	if !ok {
		t.Fatalf("m@%s not published", version)
	}
	return rel.Counter
}

// TestDirectorReplayStillRefused: accepting the director's rollback does
// not accept a replay of the director's older metadata, the one that
// assigned the older release.
func TestDirectorReplayStillRefused(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{Director: true})
	e.publish("1", layers(1), fleet.ReleaseOptions{})
	e.publish("2", layers(2), fleet.ReleaseOptions{})
	e.assign(t, map[string][]string{"1": {"dev-1"}})
	e.applyOK(t, "1")
	ts := filepath.Join(e.repoDir, update.DeviceMetaPrefix("dev-1"), "timestamp.json") // the device's own chain
	old := readFile(t, ts)
	e.assign(t, map[string][]string{"2": {"dev-1"}})
	e.applyOK(t, "2")
	writeFile(t, ts, old) // the timestamp that led to the assignment of 1
	if _, err := e.agent().Apply(e.ctx); !errors.Is(err, update.ErrRefused) || !errors.Is(err, update.ErrRollback) {
		t.Fatalf("replayed director metadata: %v; want a refusal for rollback", err)
	}
	if e.active() != "2" {
		t.Fatalf("active %q after a replay", e.active())
	}
}

// TestRefusedEventNamesRelease: a refusal of a release names it in the
// event (version and counter), whether the check, the director's
// assignment or the download refused it.
func TestRefusedEventNamesRelease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    fleet.InitOptions
		attack  func(t *testing.T, e *env)
		version string
	}{
		{"incompatible", fleet.InitOptions{}, func(t *testing.T, e *env) {
			e.publish("2", layers(2), fleet.ReleaseOptions{Boards: []string{"jetson-orin"}})
		}, "2"},
		{"tampered chunk", fleet.InitOptions{}, func(t *testing.T, e *env) {
			rel := e.publish("2", layers(2), fleet.ReleaseOptions{})
			p := filepath.Join(e.repoDir, update.ChunkPath(fileOf(t, rel, "layer2.bin").Chunks[0].SHA256))
			b := readFile(t, p)
			b[0] ^= 1
			writeFile(t, p, b)
		}, "2"},
		{"unsigned assignment", fleet.InitOptions{Director: true}, func(t *testing.T, e *env) {
			if err := e.repo.AssignUnsigned("m/9", 1234, make([]byte, 32)); err != nil {
				t.Fatal(err)
			}
		}, "9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts)
			e.publish("1", layers(1), fleet.ReleaseOptions{})
			if tc.opts.Director {
				e.assign(t, map[string][]string{"1": {"dev-1"}})
			}
			e.applyOK(t, "1")
			tc.attack(t, e)
			if _, err := e.agent().Apply(e.ctx); !errors.Is(err, update.ErrRefused) {
				t.Fatalf("apply = %v; want a refusal", err)
			}
			ev, ok := e.events.last(update.EventRefused)
			if !ok || ev.Version != tc.version || ev.Model != "m" {
				t.Fatalf("refused event %+v; want m@%s", ev, tc.version)
			}
		})
	}
}

// TestNoReleaseOfModel: a model the repository signs no release of is an
// error naming the model and what is signed, not "up to date".
func TestNoReleaseOfModel(t *testing.T) {
	for _, director := range []bool{false, true} {
		e := newEnv(t, fleet.InitOptions{Director: director})
		e.publish("1", layers(1), fleet.ReleaseOptions{})
		e.cfg.Model = "nosuchmodel"
		_, err := e.agent().Apply(e.ctx)
		if !errors.Is(err, update.ErrNoRelease) || errors.Is(err, update.ErrNoUpdate) ||
			!strings.Contains(err.Error(), "nosuchmodel") || !strings.Contains(err.Error(), "m@1") {
			t.Fatalf("director %v: apply of a model with no release: %v", director, err)
		}
	}
}

// TestRollbackFromAfterCheck: the operator's rollback of dev-1 from 2
// reaches it twice, as the director's new assignment (a check activates 1)
// and as the rollback command naming 2. Whichever comes second must change
// nothing: a rollback command that checked "2 is active" before the check
// switched to 1, and rolled back after it, took the device from 1 back to
// 2 — the release it was rolled back from — and a restart then served 2
// (fleet TestRollbackRestartThenRollout under stress-ng).
func TestRollbackFromAfterCheck(t *testing.T) {
	e := onTwo(t)

	e.assign(t, map[string][]string{"1": {"dev-1"}})
	e.applyOK(t, "1") // the check came first
	a := e.agent()
	if ref, err := a.RollbackFrom(e.ctx, "2"); !errors.Is(err, update.ErrNotActive) {
		t.Fatalf("rollback from 2 on a device at 1 = %v, %v; want ErrNotActive", ref, err)
	}
	if st, err := a.Status(e.ctx); err != nil || st.Active != "1" || st.Previous != "2" {
		t.Fatalf("after the rollback command: %+v, %v; want active 1, previous 2", st, err)
	}
	if _, err := e.agent().Apply(e.ctx); !errors.Is(err, update.ErrNoUpdate) {
		t.Fatalf("check after both: %v; want up to date on 1", err)
	}

	// The command first: it rolls back, and the director's check after it
	// finds the device up to date.
	e.assign(t, map[string][]string{"1": {"dev-1"}, "2": {"dev-1"}})
	e.applyOK(t, "2")
	e.assign(t, map[string][]string{"1": {"dev-1"}})
	if ref, err := e.agent().RollbackFrom(e.ctx, "2"); err != nil || ref.Version != "1" {
		t.Fatalf("rollback from 2 = %v, %v", ref, err)
	}
	if _, err := e.agent().Apply(e.ctx); !errors.Is(err, update.ErrNoUpdate) {
		t.Fatalf("check after the rollback: %v; want up to date on 1", err)
	}
}
