package link

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

// TestSlowHandler: a handler that never returns must not slow the
// device's publishing: its queue fills, further messages are dropped and
// counted, keep-alives and PUBACKs keep flowing.
func TestSlowHandler(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx := context.Background()
	cfg := testConfig(b)
	cfg.QueueLen = 8
	l, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	defer close(block)
	if err := l.Subscribe(ctx, l.Topics().Cmd("+"), 1, func(Message) { <-block }); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer st.Close()
	ob, err := OpenOutbox(ctx, st, l, OutboxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	send := func(n int) time.Duration {
		start := time.Now()
		for i := 0; i < n; i++ {
			if _, err := ob.Enqueue(ctx, l.Topics().Telemetry(), ClassTelemetry, func(s uint64) []byte { return seqPayload(s, 200) }); err != nil {
				t.Fatal(err)
			}
		}
		if err := ob.Flush(withTimeout(t, 60*time.Second)); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	quiet := send(5000)

	// flood the stuck handler from the cloud side while sending again
	flood := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("flood"))
	if tok := flood.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer flood.Disconnect(50)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			flood.Publish(l.Topics().Cmd("ping"), 1, false, []byte(`{"id":"x"}`)).Wait()
		}
	}()
	busy := send(5000)
	<-done
	waitFor(5*time.Second, l.Changed, func() bool { return l.Stats().HandlerDrops > 0 })
	st2 := l.Stats()
	t.Logf("5000 messages: %v alone, %v with a stuck handler flooded by 2000 commands (%.2fx); handler drops %d, connected %v",
		quiet.Round(time.Millisecond), busy.Round(time.Millisecond), float64(busy)/float64(quiet), st2.HandlerDrops, st2.Connected)
	if st2.HandlerDrops == 0 || !st2.Connected || st2.Connects != 1 {
		t.Fatalf("stats %+v: want drops counted and the one connection kept", st2)
	}

	// a cloud subscriber that never reads: its handler blocks, so paho
	// stops reading its socket and the broker has to queue for it; the
	// device's publishing does not wait for it
	stuck := make(chan struct{})
	defer close(stuck)
	sleeper := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("sleeper"))
	if tok := sleeper.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer sleeper.Disconnect(0)
	sleeper.Subscribe(l.Topics().Telemetry(), 1, func(mqtt.Client, mqtt.Message) { <-stuck }).Wait()
	slow := send(5000)
	t.Logf("5000 messages with a subscriber that never reads: %v (%.2fx alone)", slow.Round(time.Millisecond), float64(slow)/float64(quiet))
	if slow > 10*quiet+5*time.Second {
		t.Errorf("a subscriber that never reads slowed the device %v -> %v", quiet, slow)
	}
}
