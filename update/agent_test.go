package update_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// TestApplyDelta installs a first release, then a second that changes one
// "layer": only that layer's chunks travel, the version is staged, checked,
// activated, and the first becomes previous.
func TestApplyDelta(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{})
	layer1, layer2 := randBytes(1, 3<<20), randBytes(2, 3<<20)
	e.publish("1", map[string][]byte{"model.onnx": layer1, "layer2.bin": layer2}, fleet.ReleaseOptions{})
	a := e.agent()
	if _, err := a.Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	if e.active() != "1" {
		t.Fatalf("active %q after the first apply", e.active())
	}
	first := a.BytesFetched()
	if first < int64(len(layer1)+len(layer2)) {
		t.Fatalf("first install fetched %d bytes", first)
	}
	e.publish("2", map[string][]byte{"model.onnx": layer1, "layer2.bin": randBytes(3, 3<<20)}, fleet.ReleaseOptions{})
	if _, err := a.Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	delta := a.BytesFetched() - first
	if float64(delta) > 1.2*float64(3<<20) || delta < 3<<20 {
		t.Fatalf("one-layer change fetched %d bytes for 3 MiB changed", delta)
	}
	st, err := a.Status(e.ctx)
	if err != nil || st.Active != "2" || st.Previous != "1" || st.Journal.Phase != update.PhaseActive {
		t.Fatalf("status %+v, %v", st, err)
	}
	b, err := e.st.ReadFile(e.ctx, "m@2", "layer2.bin")
	if err != nil || !bytes.Equal(b, randBytes(3, 3<<20)) {
		t.Fatalf("installed layer differs: %v", err)
	}
	want := []update.EventKind{update.EventOffered, update.EventDownloading, update.EventVerified, update.EventStaged, update.EventHealthOK, update.EventActive}
	if k := e.events.kinds(); !containsInOrder(k, want) {
		t.Fatalf("events %v, want %v in order", k, want)
	}
	if _, err := a.Apply(e.ctx); !errors.Is(err, update.ErrNoUpdate) {
		t.Fatalf("apply when up to date: %v", err)
	}
	// Manual rollback, and the rolled-back release is not installed again.
	if ref, err := a.Rollback(e.ctx); err != nil || ref.Version != "1" {
		t.Fatalf("rollback = %v, %v", ref, err)
	}
	if _, err := a.Apply(e.ctx); !errors.Is(err, update.ErrNoUpdate) {
		t.Fatalf("apply after a rollback: %v (the bad release must not return)", err)
	}
}

func containsInOrder(have, want []update.EventKind) bool {
	i := 0
	for _, k := range have {
		if i < len(want) && k == want[i] {
			i++
		}
	}
	return i == len(want) || slices.Equal(have, want)
}

// TestRootRotation: the device follows a rotation of the root and of the
// targets keys it signs, and trusts the new root from then on.
func TestRootRotation(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{RootKeys: 2, RootThreshold: 2})
	e.publish("1", layers(1), fleet.ReleaseOptions{})
	e.applyOK(t, "1")
	if err := e.repo.RotateRoot(fleet.RotateOptions{Repo: "image", Roles: []string{"root", "targets"}, Keys: 2, Threshold: 2, KeyDir: e.keyDir}); err != nil {
		t.Fatal(err)
	}
	e.publish("2", layers(2), fleet.ReleaseOptions{})
	e.applyOK(t, "2")
	root, err := metadata.Root().FromFile(filepath.Join(e.st.Path()+".tuf", "image", "root.json"))
	if err != nil || root.Signed.Version != 2 {
		t.Fatalf("trusted root after rotation: %v, %v", root, err)
	}
}

// TestDirector: the director decides which device installs which signed
// release; a release assigned to other devices is not offered here, and
// an assignment whose hashes differ from the image repository's is
// refused.
func TestDirector(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{Director: true})
	e.publish("1", layers(1), fleet.ReleaseOptions{})
	e.publish("2", layers(2), fleet.ReleaseOptions{})
	a := e.agent()
	if _, err := a.Apply(e.ctx); !errors.Is(err, update.ErrNoUpdate) {
		t.Fatalf("nothing assigned: %v", err)
	}
	if err := e.repo.Assign("m", "1", []string{"dev-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(e.ctx); err != nil || e.active() != "1" {
		t.Fatalf("assigned 1 to this device: %v, active %q (2 is newer but not assigned)", err, e.active())
	}
	if err := e.repo.Assign("m", "2", []string{"dev-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(e.ctx); !errors.Is(err, update.ErrNoUpdate) || e.active() != "1" {
		t.Fatalf("2 assigned to another device: %v, active %q", err, e.active())
	}
	// A director that names a signed path with other hashes.
	if err := e.repo.AssignUnsigned("m/2", 999, make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(e.ctx); !errors.Is(err, update.ErrNotSigned) || e.active() != "1" {
		t.Fatalf("assignment with other hashes: %v, active %q", err, e.active())
	}
}

// TestClockFromTheFuture: one check with a clock years ahead is refused
// (everything looks expired), but does not poison the clock floor: once
// the clock is right again and the timestamp refreshed, updates go on.
func TestClockFromTheFuture(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{})
	e.publish("1", layers(1), fleet.ReleaseOptions{})
	e.applyOK(t, "1")
	e.publish("2", layers(2), fleet.ReleaseOptions{})
	right := e.now
	e.now = right.AddDate(70, 0, 0)
	if _, err := e.agent().Apply(e.ctx); !errors.Is(err, update.ErrFreeze) {
		t.Fatalf("clock in 2096: %v", err)
	}
	e.now = right.Add(time.Hour)
	if err := e.repo.RefreshTimestamp("image"); err != nil {
		t.Fatal(err)
	}
	e.applyOK(t, "2")
}
