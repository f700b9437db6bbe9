package fleet_test

import (
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// TestBulkFromStaticHost: with fleet serve --bulk-url, whole devices
// (runtime/device) fetch metadata and chunks from nginx over HTTPS and
// none over the broker; when the host loses a chunk, the devices fetch it
// over the request topics instead and the rollout still completes.
func TestBulkFromStaticHost(t *testing.T) {
	e := newSimEnvWith(t, 3, true)
	e.install1()
	srv := e.servers[0]
	st0 := srv.Stats()
	bytes0, _, err := e.nginx.BytesSent()
	if err != nil {
		t.Fatal(err)
	}
	rel := e.publish(nil, "2", "model.layers.0.", false)
	r, _ := e.rollout(fleet.Rollout{ID: "r2", Model: model, Version: "2", Waves: []int{100}, SuccessPercent: 100}, 3*time.Minute)
	if r.State != fleet.RolloutCompleted {
		t.Fatalf("rollout of 2 from the static host: %s (%s)", r.State, r.Reason)
	}
	st1 := srv.Stats()
	bytes1, reqs, err := e.nginx.BytesSent()
	if err != nil {
		t.Fatal(err)
	}
	changed := changedBytes(e.published["1"], rel)
	t.Logf("3 devices updated to 2 (%d bytes changed): nginx sent %d bytes (%d requests in all); fleet serve answered %d metadata and %d chunk requests",
		changed, bytes1-bytes0, reqs, st1.MetaRequests-st0.MetaRequests, st1.ChunkRequests-st0.ChunkRequests)
	if st1.ChunkRequests != st0.ChunkRequests || st1.MetaRequests != st0.MetaRequests || bytes1-bytes0 < 3*changed {
		t.Fatalf("bulk data went over the broker: %d metadata and %d chunk requests answered by fleet serve, %d bytes from nginx for 3 x %d changed",
			st1.MetaRequests-st0.MetaRequests, st1.ChunkRequests-st0.ChunkRequests, bytes1-bytes0, changed)
	}

	// The host goes away: the devices fetch release 3 over the broker
	// (what TUF verifies is the same either way).
	e.nginx.Stop()
	e.publish(nil, "3", "model.layers.1.", false)
	r, _ = e.rollout(fleet.Rollout{ID: "r3", Model: model, Version: "3", Waves: []int{100}, SuccessPercent: 100}, 3*time.Minute)
	if r.State != fleet.RolloutCompleted {
		t.Fatalf("rollout of 3 with the static host gone: %s (%s)", r.State, r.Reason)
	}
	st2 := srv.Stats()
	if st2.ChunkRequests == st1.ChunkRequests {
		t.Fatal("the rollout of 3 completed with no chunk fetched over the broker, and the static host down")
	}
	t.Logf("static host down: fleet serve answered %d metadata and %d chunk requests for release 3", st2.MetaRequests-st1.MetaRequests, st2.ChunkRequests-st1.ChunkRequests)
}
