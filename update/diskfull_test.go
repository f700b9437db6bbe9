package update_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// smallDisk mounts a tmpfs of size bytes for the test, or skips.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("a small file system is needed to fill: mount -t tmpfs %s: %v (needs root or CAP_SYS_ADMIN)", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes zeros to path until the file system is full.
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err = f.Write(buf); err != nil {
			break
		}
	}
	return errors.Join(func() error {
		if errors.Is(err, syscall.ENOSPC) {
			return nil
		}
		return err
	}(), f.Close())
}

// TestDiskFillsMidDownload fills the device's disk while an update
// downloads (another process's file takes the space left): the update
// fails with ErrNoSpace, the active version keeps serving from its
// export and reads back from a store that verifies; once the file is
// deleted the same update completes without fetching again what it had.
func TestDiskFillsMidDownload(t *testing.T) {
	disk := smallDisk(t, "40m")
	e := newEnv(t, fleet.InitOptions{})
	st, err := store.Open(e.ctx, filepath.Join(disk, "device.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	filler := filepath.Join(disk, "filler")
	var total int64
	var fillErr error
	filled := false
	events := update.EventFunc(func(_ context.Context, ev update.Event) error {
		if ev.Kind == update.EventOffered && ev.Version == "2" && total == 0 {
			total = ev.Total // the first offer: everything is missing
		}
		// The agent waits for Emit: the disk fills between two chunks.
		if ev.Kind == update.EventDownloading && ev.Done > 0 && ev.Version == "2" && !filled {
			filled, fillErr = true, fill(filler)
		}
		return nil
	})
	newAgent := func() *update.Agent {
		a, err := update.New(e.cfg, update.Deps{Store: st, Source: e.src, Activator: exportingActivator{st}, Events: events, Now: e.clock})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	e.publish("1", killFiles(1), fleet.ReleaseOptions{})
	if _, err := newAgent().Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	big := func(v int) map[string][]byte {
		return map[string][]byte{"model.onnx": randBytes(1000, 2<<20), "layer2.bin": randBytes(uint64(3000+v), 8<<20)}
	}
	e.publish("2", big(2), fleet.ReleaseOptions{})
	a := newAgent()
	_, err = a.Apply(e.ctx)
	if fillErr != nil {
		t.Fatalf("filling the disk: %v", fillErr)
	}
	if !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("apply on a disk that filled: %v, want store.ErrNoSpace", err)
	}
	first := a.BytesFetched()
	t.Logf("the disk filled after %d of %d bytes: %v", first, total, err)

	// The active version serves: its export is whole, and the store
	// verifies and reads it back.
	active := store.Ref{Name: "m", Version: "1"}
	if v, err := st.Resolve(e.ctx, "m"); err != nil || v.Ref() != active {
		t.Fatalf("active after the failure: %v %v, want m@1", v, err)
	}
	for p, want := range killFiles(1) {
		b, err := os.ReadFile(filepath.Join(st.ExportDir(active), p))
		if err != nil || !bytes.Equal(b, want) {
			t.Fatalf("export of m@1 %s: %v", p, err)
		}
		if b, err := st.ReadFile(e.ctx, active.String(), p); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("store's m@1 %s: %v", p, err)
		}
	}
	if rep, err := st.Verify(e.ctx, nil); err != nil || len(rep.Damaged) > 0 {
		t.Fatalf("verify after the disk filled: %v %v", err, rep.Damaged)
	}

	// Space returns: the update resumes where it stopped.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	b := newAgent()
	if _, err := b.Resume(e.ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if v, err := st.Resolve(e.ctx, "m"); err != nil || v.Version != "2" {
		t.Fatalf("after space returned: %v %v, want m@2 active", v, err)
	}
	second := b.BytesFetched()
	t.Logf("fetched %d bytes before the disk filled, %d after (%d missing in all)", first, second, total)
	// At most the chunk that could not be stored is fetched twice.
	if first+second > total+4<<20 || second >= total {
		t.Errorf("fetched %d + %d bytes for %d missing: the resumed update fetched again what it had", first, second, total)
	}
	if rep, err := st.Verify(e.ctx, nil); err != nil || len(rep.Damaged) > 0 {
		t.Fatalf("verify at the end: %v %v", err, rep.Damaged)
	}
}
