package fleet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// TestIndexMemory: reading the assignment index costs a few dozen bytes a
// device (its name), not a map entry and a list each: the leader reads it
// at every wave, and at 100,000 devices the first format (model -> device
// -> versions) was ~20 MB of fleet serve's peak (291 bytes a device to
// read; now 96, most of it the JSON decoder growing the lists). At most
// 120 bytes a device here, and at most half the first format's.
// EDGEINFER_VIEW_DEVICES sets the count (20,000).
func TestIndexMemory(t *testing.T) {
	n := 20000
	if v, _ := strconv.Atoi(os.Getenv("EDGEINFER_VIEW_DEVICES")); v > 0 {
		n = v
	}
	r := &Repository{Dir: t.TempDir()}
	idx := assignIndex{"m": {"1": nil, "2": nil}}
	first := map[string]map[string][]string{"m": {}}
	for i := range n {
		d, v := fmt.Sprintf("sim-%06d", i), strconv.Itoa(1+i%2)
		idx["m"][v] = append(idx["m"][v], d)
		first["m"][d] = []string{v}
	}
	if err := r.writeIndex(idx); err != nil {
		t.Fatal(err)
	}
	cost := func() float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		got, err := r.readIndex()
		runtime.ReadMemStats(&after)
		if err != nil || len(got["m"]["1"])+len(got["m"]["2"]) != n {
			t.Fatalf("read %d devices (%v), want %d", len(got["m"]["1"])+len(got["m"]["2"]), err, n)
		}
		return float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
	}
	now := cost()
	if err := writeAtomicJSON(r.indexPath(), first); err != nil {
		t.Fatal(err)
	}
	was := cost()
	t.Logf("%d devices: reading the index allocates %.0f bytes a device (the first format: %.0f)", n, now, was)
	if now > 120 || now > was/2 {
		t.Errorf("reading the index allocates %.0f bytes a device, want <= 120 and <= half the first format's %.0f", now, was)
	}
}

func writeAtomicJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeAtomic(path, b)
}
