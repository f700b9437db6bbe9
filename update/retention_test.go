package update_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
	"github.com/edgeinfer/edgeinfer/update/updatetest"
)

// exportingActivator exports the version it checks where the engine would
// (store.ExportDir), as serving.CheckActivator and EngineActivator do, so
// the device's directory holds what it holds on a real device.
type exportingActivator struct{ st *store.Store }

func (a exportingActivator) Swap(ctx context.Context, ref store.Ref, check update.Check) error {
	dir := a.st.ExportDir(ref)
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	tmp := dir + ".export"
	if _, err := a.st.Export(ctx, ref.String(), tmp); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// sameWeights is release v of a model whose weights do not change between
// releases (the tiny model re-imported under a new version): only the
// manifest differs.
func sameWeights(int) map[string][]byte {
	return map[string][]byte{"model.onnx": randBytes(7, 64<<10), "model.onnx.data": randBytes(8, 8<<20)}
}

// TestRetentionBoundsDisk applies releases one after another on one
// device, each activated by an activator that exports it as the engine
// does, and holds the device's directory (store, exports, metadata) to
// 2.5 bundles after every one: the active and the previous version are
// kept, older ones go with their exported copies and their chunks.
func TestRetentionBoundsDisk(t *testing.T) {
	n := 6
	if testing.Short() {
		n = 3
	}
	e := newEnv(t, fleet.InitOptions{})
	devDir := filepath.Dir(e.st.Path())
	a, err := update.New(e.cfg, update.Deps{Store: e.st, Source: e.src, Activator: exportingActivator{e.st}, Events: e.events, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := updatetest.DiskUse(t, writeBundle(t, "m", "1", sameWeights(1)))
	for v := 1; v <= n; v++ {
		e.publish(strconv.Itoa(v), sameWeights(v), fleet.ReleaseOptions{})
		if _, err := a.Apply(e.ctx); err != nil {
			t.Fatalf("apply %d: %v", v, err)
		}
		size, alloc := updatetest.DiskUse(t, devDir)
		t.Logf("after %d updates: %.2f bundles (allocated %.2f)", v, float64(size)/float64(bundle), float64(alloc)/float64(bundle))
		if float64(size) > 2.5*float64(bundle) {
			t.Errorf("after %d updates the device holds %.2f bundles (%d bytes, one bundle %d), want ≤ 2.5", v, float64(size)/float64(bundle), size, bundle)
		}
	}
	// The rollback target is still there.
	var versions []string
	for en, err := range e.st.List(e.ctx) {
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, en.Ref.Version)
	}
	if want := []string{strconv.Itoa(n - 1), strconv.Itoa(n)}; len(versions) != 2 || versions[0] != want[0] || versions[1] != want[1] {
		t.Errorf("versions kept %v, want %v", versions, want)
	}
}

// TestRetentionKeepsMore: Config.Keep 3 keeps a version beyond the
// previous one, the newest; 1 is refused (the rollback target must stay).
func TestRetentionKeepsMore(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{})
	e.cfg.Keep = 3
	a := e.agent()
	for v := 1; v <= 5; v++ {
		e.publish(strconv.Itoa(v), killFiles(v), fleet.ReleaseOptions{})
		if _, err := a.Apply(e.ctx); err != nil {
			t.Fatalf("apply %d: %v", v, err)
		}
	}
	var versions []string
	for en, err := range e.st.List(e.ctx) {
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, en.Ref.Version)
	}
	if len(versions) != 3 || versions[0] != "3" || versions[2] != "5" {
		t.Errorf("versions kept %v, want [3 4 5]", versions)
	}
	if rep, err := e.st.Verify(e.ctx, nil); err != nil || len(rep.Damaged) > 0 {
		t.Fatalf("verify: %v %v", err, rep.Damaged)
	}
	e.cfg.Keep = 1
	if _, err := update.New(e.cfg, update.Deps{Store: e.st, Source: e.src}); !errors.Is(err, update.ErrConfig) {
		t.Errorf("Keep 1: %v, want ErrConfig", err)
	}
}

// fakeDisk reports a fixed free space.
type fakeDisk struct{ free int64 }

func (d *fakeDisk) Free(string) (int64, error) { return d.free, nil }

// TestRefusedWithoutSpace: an update the disk cannot hold is refused
// before anything is fetched, with an event that says so; the active
// version stays; once space is there the same release installs.
func TestRefusedWithoutSpace(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{})
	disk := &fakeDisk{free: 1 << 40}
	newAgent := func() *update.Agent {
		a, err := update.New(e.cfg, update.Deps{Store: e.st, Source: e.src, Activator: e.act, Events: e.events, Now: e.clock, Disk: disk})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	e.publish("1", killFiles(1), fleet.ReleaseOptions{})
	if _, err := newAgent().Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	rel := e.publish("2", killFiles(2), fleet.ReleaseOptions{})
	a := newAgent()
	o, err := a.Check(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	need := update.SpaceNeeded(rel, o.Missing)
	disk.free = need - 1
	_, err = a.Apply(e.ctx)
	if !errors.Is(err, update.ErrRefused) || !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("apply with %d bytes free, %d needed: %v, want ErrRefused and ErrNoSpace", disk.free, need, err)
	}
	ev, ok := e.events.last(update.EventRefused)
	if !ok || ev.Version != "2" || !strings.Contains(ev.Reason, "free") {
		t.Fatalf("refusal event %+v (found %v), want one for m@2 that says why", ev, ok)
	}
	if a.BytesFetched() != 0 || e.active() != "1" {
		t.Fatalf("after the refusal: %d bytes fetched, active %q; want nothing fetched, 1 active", a.BytesFetched(), e.active())
	}
	disk.free = need
	if _, err := a.Apply(e.ctx); err != nil || e.active() != "2" {
		t.Fatalf("apply with %d bytes free: %v, active %q", disk.free, err, e.active())
	}
}
