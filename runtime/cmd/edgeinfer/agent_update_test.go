package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/update"
)

// The link is the update agent's MQTT transport.
var _ update.Requester = (*link.Link)(nil)

// TestUpdateOverLink: the update agent's MQTTSource fetches metadata
// through the device's link from a fleet server answering with
// update.ServeRequest over a repository directory.
func TestUpdateOverLink(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "image"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := `{"signed":{"_type":"timestamp"}}`
	if err := os.WriteFile(filepath.Join(repo, "image", "timestamp.json"), []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func(device string) *link.Link {
		l, err := link.Open(ctx, link.Config{Broker: b.URL(), Fleet: "f", Device: device, BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := l.WaitConnected(wctx); err != nil {
			t.Fatal(err)
		}
		return l
	}
	srv := open("fleet-server")
	err := srv.ServeRequests(ctx, "f", "fleet", func(ctx context.Context, _, topic string, p []byte) []byte {
		return update.ServeRequest(ctx, update.FileSource{Dir: repo}, topic, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	dev := open("d")
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := update.MQTTSource{R: dev}.FetchMeta(fctx, "image/timestamp.json", 1<<14)
	if err != nil || string(got) != want {
		t.Fatalf("FetchMeta over the link: %q, %v", got, err)
	}
	if _, err := (update.MQTTSource{R: dev}).FetchMeta(fctx, "image/missing.json", 1<<14); err == nil {
		t.Fatal("a missing file was fetched")
	}
}
