package link

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

// TestOutage sends 100,000 messages through the outbox while the broker
// is stopped for 10 s in the middle: every seq must arrive, duplicates only
// from the in-flight window, none out of order.
func TestOutage(t *testing.T) {
	n, outage := uint64(100_000), 10*time.Second
	if testing.Short() {
		n, outage = 20_000, time.Second
	}
	b := mosquittotest.Start(t, mosquittotest.Options{Persistence: true})
	rcv := newReceiver(t, b, "cloud", "edgeinfer/v1/f/d/telemetry")
	st := openStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer st.Close()
	ctx := context.Background()
	l, err := Open(ctx, testConfig(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ob, err := OpenOutbox(ctx, st, l, OutboxConfig{MaxBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()

	produced := make(chan error, 1)
	go func() {
		for i := uint64(1); i <= n; i++ {
			if _, err := ob.Enqueue(ctx, l.Topics().Telemetry(), ClassTelemetry, func(seq uint64) []byte { return seqPayload(seq, 100) }); err != nil {
				produced <- err
				return
			}
			if i%1000 == 0 {
				if err := ob.Sync(ctx); err != nil {
					produced <- err
					return
				}
			}
		}
		produced <- ob.Sync(ctx)
	}()
	// stop the broker once a third has been acknowledged
	if !waitFor(120*time.Second, ob.Changed, func() bool { return ob.Stats().Acked >= n/3 }) {
		t.Fatalf("only %d acknowledged before the outage", ob.Stats().Acked)
	}
	b.Stop()
	atStop := ob.Stats()
	time.Sleep(outage) // the outage itself: the broker stays away this long on purpose
	acked := ob.Stats().Acked
	b.Start()
	up := time.Now()
	if !waitFor(30*time.Second, ob.Changed, func() bool { return ob.Stats().Acked > acked }) {
		t.Fatalf("no PUBACK within 30 s of the broker's restart: %+v", l.Stats())
	}
	t.Logf("reconnect: first PUBACK %v after the broker was back (backoff max %v)", time.Since(up).Round(time.Millisecond), testConfig(b).BackoffMax)
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(withTimeout(t, 180*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor(60*time.Second, rcv.Changed, func() bool { return rcv.distinct() >= int(n) })
	received, lost, dups, ooo := rcv.tally(n)
	t.Logf("outbox at the stop: %d in flight, depth %d", atStop.InFlight, atStop.Depth)
	t.Logf("sent %d received %d lost %d duplicates %d out_of_order %d", n, received, lost, dups, ooo)
	if lost != 0 || ooo != 0 {
		t.Errorf("lost %d, out of order %d (want 0)", lost, ooo)
	}
	// The outbox sends again only what was in flight when a connection
	// went away: at most W = 256 per reconnection. The receiver's other
	// duplicates are the broker's and the receiving paho client's own
	// QoS 1 redeliveries after the restart (messages delivered whose PUBACK
	// was not processed), which Dedup removes all the same.
	reconnects, resent := int(l.Stats().Connects)-1, int(ob.Stats().Resent)
	t.Logf("publisher reconnections %d, messages the outbox sent again %d", reconnects, resent)
	if resent > reconnects*256 {
		t.Errorf("the outbox sent %d messages again over %d reconnection(s): more than W each", resent, reconnects)
	}
	rcv.mu.Lock()
	t.Logf("duplicates the broker marked as its own redeliveries (DUP flag): %d", rcv.dupFlag)
	rcv.mu.Unlock()
}

func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestRepublishWhenBrokerForgets: messages the broker acknowledged and had
// queued for a subscriber that was away, and the retained state, are lost
// when the broker restarts without its persistence. The outbox sends them
// again once the link sees the session gone, so the subscriber, back with
// a new session, gets every seq.
func TestRepublishWhenBrokerForgets(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Persistence: true})
	const filter = "edgeinfer/v1/f/d/#"
	first := newReceiver(t, b, "cloud", filter)
	st := openStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer st.Close()
	ctx := context.Background()
	// The device reconnects within 250 ms, likely before the cloud
	// does: the outbox's wait before it republishes lets the cloud
	// subscribe first.
	l := openLink(t, testConfig(b))
	ob, err := OpenOutbox(ctx, st, l, OutboxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	send := func(topic string, class Class) {
		t.Helper()
		if _, err := ob.Enqueue(ctx, topic, class, func(seq uint64) []byte { return seqPayload(seq, 50) }); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		send(l.Topics().Events(), ClassEvent)
	}
	state := l.Topics().Base() + "update"
	send(state, ClassStatus) // seq 6, retained
	if !waitFor(10*time.Second, first.Changed, func() bool { return first.distinct() == 6 }) {
		t.Fatalf("before the restart the cloud got %d of 6", first.distinct())
	}
	// The cloud goes away (its session stays); the broker acknowledges
	// five more events and queues them for it.
	first.client.Disconnect(100)
	for range 5 {
		send(l.Topics().Events(), ClassEvent)
	}
	if !waitFor(10*time.Second, ob.Changed, func() bool { return ob.Stats().Acked == 11 }) {
		t.Fatalf("acknowledged %d of 11", ob.Stats().Acked)
	}
	connects := l.Stats().Connects
	b.Stop()
	b.Forget()
	b.Start()
	second := newReceiver(t, b, "cloud", filter)
	if !waitFor(15*time.Second, second.Changed, func() bool {
		second.mu.Lock()
		defer second.mu.Unlock()
		for s := uint64(6); s <= 11; s++ {
			if second.got[s] == 0 {
				return false
			}
		}
		return true
	}) {
		second.mu.Lock()
		t.Fatalf("after the broker forgot everything the cloud got seqs %v; want the retained state (6) and the five queued events (7–11)", second.got)
	}
	second.mu.Lock()
	retained := second.topics[6]
	second.mu.Unlock()
	if retained != state {
		t.Errorf("seq 6 came on %q, want the retained state topic", retained)
	}
	if st := ob.Stats(); st.Republished == 0 || l.Stats().Connects <= connects {
		t.Errorf("republished %d after %d connections", st.Republished, l.Stats().Connects)
	}
}
