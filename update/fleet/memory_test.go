package fleet

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/wire"
)

// viewRecords are device i's retained status and update state, as a
// device of the scale sim publishes them after an update (the times of
// one busy minute: devices share them).
func viewRecords(i int) (status, state []byte) {
	id := fmt.Sprintf("dev-%06d", i)
	at := time.Date(2026, 12, 3, 19, 0, i%60, 0, time.UTC).Format(time.RFC3339)
	status, _ = json.Marshal(link.Status{Schema: link.StatusSchema, State: "online", Fleet: "f", Device: id, Time: at,
		Birth: &link.Birth{SDKVersion: update.SDKVersion, Board: "rk3588", Models: []link.ModelVersion{{Name: "m", Active: "2", Previous: "1"}}}})
	state, _ = json.Marshal(wire.State{Schema: wire.StateSchema, Seq: 7, Fleet: "f", Device: id, Board: "rk3588",
		Labels: map[string]string{"site": "s" + strconv.Itoa(i%40), "line": "l" + strconv.Itoa(i%4)}, Model: "m", Active: "2", Previous: "1",
		Installed: 2, Phase: update.PhaseActive, Version: "2", Counter: 2, LastEvent: "active", Checked: at, Time: at})
	return status, state
}

// heapPerDevice is the live heap a view holding n devices takes, per
// device.
func heapPerDevice(t *testing.T, n int) float64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := NewView("f")
	now := time.Now()
	for i := range n {
		status, state := viewRecords(i)
		id := fmt.Sprintf("dev-%06d", i)
		if err := v.Ingest("edgeinfer/v1/f/"+id+"/status", status, now); err != nil {
			t.Fatal(err)
		}
		if err := v.Ingest("edgeinfer/v1/f/"+id+"/update", state, now); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// TestViewMemoryPerDevice: the view's record of a device (retained status
// and update state, the fleet's own copy) is compact: at most 600 bytes
// of live heap a device (1,200 before the view shared what devices have
// in common), so that fleet serve at 100,000 devices holds its view in
// about 60 MB. EDGEINFER_VIEW_DEVICES sets the count (20,000).
func TestViewMemoryPerDevice(t *testing.T) {
	n := 20000
	if v, _ := strconv.Atoi(os.Getenv("EDGEINFER_VIEW_DEVICES")); v > 0 {
		n = v
	}
	per := heapPerDevice(t, n)
	t.Logf("%d devices: %.0f bytes of live heap a device", n, per)
	if per > 600 {
		t.Errorf("%.0f bytes of live heap a device in the view, want <= 600", per)
	}
}
