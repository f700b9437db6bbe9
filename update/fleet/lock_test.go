package fleet_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// TestChangesDoNotLoseEachOther: fleet serve's leader re-signs timestamps
// and assignments while an operator publishes, each from its own process
// holding its own Repository. A change made from a Repository opened
// before another's publish must keep that publish: the month test caught a
// timestamp re-signed from a stale read hiding a new release, whose
// assignment every device then refused.
func TestChangesDoNotLoseEachOther(t *testing.T) {
	ctx := context.Background()
	dir, keys := t.TempDir(), t.TempDir()
	op, err := fleet.Init(dir, keys, keys, fleet.InitOptions{Director: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	img0, dir0 := stampVersion(t, dir, update.RepoImage), stampVersion(t, dir, update.RepoDirector)
	leader, err := fleet.Open(dir, fleet.InitOptions{}, nil, keys)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := op.Publish(ctx, writeBundle(t, "1", map[string][]byte{"model.onnx": randBytes(1, 4096)}), fleet.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	// The leader opened before the publish; its timestamp refresh and
	// assignment must see release 1.
	if err := leader.RefreshTimestamp(update.RepoImage); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.SetAssignments("m", map[string][]string{"1": {"dev-1"}}); err != nil {
		t.Fatalf("the leader cannot assign a release published after it opened: %v", err)
	}
	// And the operator, whose copy predates the leader's writes, publishes
	// again without rolling a version back.
	if _, _, err := op.Publish(ctx, writeBundle(t, "2", map[string][]byte{"model.onnx": randBytes(2, 4096)}), fleet.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh, err := fleet.Open(dir, fleet.InitOptions{}, nil, keys)
	if err != nil {
		t.Fatal(err)
	}
	rels := fresh.Releases()
	for _, v := range []string{"1", "2"} {
		if rels[update.TargetPath("m", v)] == nil {
			t.Errorf("release m@%s is not signed after the leader's refresh (signed: %v)", v, rels)
		}
	}
	if got := fresh.Assignments("m"); len(got["1"]) != 1 {
		t.Errorf("assignments of m: %v, want 1 -> [dev-1]", got)
	}
	// The assignment names a device: its own chain is signed, and the
	// shared chain's timestamp with it.
	checkStamps(t, dir, img0+3, dir0+1)
	if got := stampVersion(t, dir, "director/devices/dev-1"); got != 1 {
		t.Errorf("dev-1's chain timestamp version %d, want 1", got)
	}
}

// TestConcurrentChanges: publishes, timestamp refreshes and assignments
// from separate Repositories at once (as from separate processes: flock
// locks exclude each other per open file, within a process too) all land.
func TestConcurrentChanges(t *testing.T) {
	ctx := context.Background()
	dir, keys := t.TempDir(), t.TempDir()
	if _, err := fleet.Init(dir, keys, keys, fleet.InitOptions{Director: true}, nil); err != nil {
		t.Fatal(err)
	}
	img0, dir0 := stampVersion(t, dir, update.RepoImage), stampVersion(t, dir, update.RepoDirector)
	const publishers, each = 3, 4
	bundles := map[string]string{}
	for p := range publishers {
		for i := range each {
			v := fmt.Sprintf("%d.%d", p, i)
			bundles[v] = writeBundle(t, v, map[string][]byte{"model.onnx": randBytes(uint64(10*p+i), 2048)})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, publishers+1)
	for p := range publishers {
		wg.Go(func() {
			r, err := fleet.Open(dir, fleet.InitOptions{}, nil, keys)
			if err != nil {
				errs <- err
				return
			}
			for i := range each {
				if _, _, err := r.Publish(ctx, bundles[fmt.Sprintf("%d.%d", p, i)], fleet.ReleaseOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		r, err := fleet.Open(dir, fleet.InitOptions{}, nil, keys)
		if err != nil {
			errs <- err
			return
		}
		for range publishers * each {
			if err := r.RefreshTimestamp(update.RepoImage); err != nil {
				errs <- err
				return
			}
			if err := r.RefreshTimestamp(update.RepoDirector); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fresh, err := fleet.Open(dir, fleet.InitOptions{}, nil, keys)
	if err != nil {
		t.Fatal(err)
	}
	rels := fresh.Releases()
	if len(rels) != publishers*each {
		t.Errorf("%d releases signed, want %d: %v", len(rels), publishers*each, rels)
	}
	seen := map[uint64]bool{}
	for _, r := range rels {
		if seen[r.Counter] {
			t.Errorf("counter %d given twice", r.Counter)
		}
		seen[r.Counter] = true
	}
	checkStamps(t, dir, img0+2*publishers*each, dir0+publishers*each)
}

// stampVersion is the version of repo's timestamp on disk: each change
// signs the next one, so a change made from a stale read shows as a
// version reused and the count comes up short.
func stampVersion(t *testing.T, dir, repo string) int64 {
	t.Helper()
	ts, err := metadata.Timestamp().FromFile(filepath.Join(dir, repo, "timestamp.json"))
	if err != nil {
		t.Fatal(err)
	}
	return ts.Signed.Version
}

func checkStamps(t *testing.T, dir string, image, director int64) {
	t.Helper()
	if got := stampVersion(t, dir, update.RepoImage); got != image {
		t.Errorf("image timestamp version %d, want %d (one per change)", got, image)
	}
	if got := stampVersion(t, dir, update.RepoDirector); got != director {
		t.Errorf("director timestamp version %d, want %d (one per change)", got, director)
	}
}
