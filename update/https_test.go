package update_test

import (
	"errors"
	"testing"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
	"github.com/edgeinfer/edgeinfer/update/updatetest"
)

// TestHTTPSNginx: the repository published by fleet, served as static
// files by Debian's nginx over TLS on loopback, updates a device; a delta
// release moves about the changed layer; a file nginx does not have is
// ErrNotFound (the end of root rotations), not a refusal.
func TestHTTPSNginx(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{})
	ng := updatetest.StartNginx(t, e.repoDir)
	e.src = update.HTTPSource{BaseURL: ng.URL, Client: ng.Client}
	e.publish("1", layers(1), fleet.ReleaseOptions{})
	a := e.agent()
	if _, err := a.Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	first := a.BytesFetched()
	e.publish("2", layers(2), fleet.ReleaseOptions{})
	if _, err := a.Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	if e.active() != "2" {
		t.Fatalf("active %q", e.active())
	}
	if d := a.BytesFetched() - first; d > 1<<20+4096 {
		t.Fatalf("delta fetched %d bytes for a 1 MiB layer", d)
	}
	if _, err := e.src.FetchMeta(e.ctx, "image/99.root.json", 1<<20); !errors.Is(err, update.ErrNotFound) {
		t.Fatalf("absent root: %v", err)
	}
	// A client that does not trust the test CA gets no release.
	plain := update.HTTPSource{BaseURL: ng.URL}
	if _, err := plain.FetchMeta(e.ctx, "image/timestamp.json", 1<<14); !errors.Is(err, update.ErrSource) {
		t.Fatalf("untrusted certificate: %v", err)
	}
}
