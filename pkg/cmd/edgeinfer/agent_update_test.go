package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/link"
	"github.com/edgeinfer/edgeinfer/update/link/mosquittotest"
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

// TestUpdateEventsThroughOutbox: the update agent's events reach the
// events topic through the outbox, numbered.
func TestUpdateEventsThroughOutbox(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := link.Open(ctx, link.Config{Broker: b.URL(), Fleet: "f", Device: "d"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ob, err := link.OpenOutbox(ctx, st, l, link.OutboxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	got := make(chan string, 4)
	watch := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("watch"))
	if tok := watch.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer watch.Disconnect(50)
	watch.Subscribe(l.Topics().Events(), 1, func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) }).Wait()
	ev := updateEvents(ob, l)
	if err := ev.Emit(ctx, update.Event{Kind: update.EventActive, Model: "tinylm", Version: "2", Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		var e updateEventPayload
		if err := json.Unmarshal([]byte(p), &e); err != nil || e.Seq == 0 || e.Kind != update.EventActive || e.Model != "tinylm" {
			t.Fatalf("event %s: %v", p, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
}
