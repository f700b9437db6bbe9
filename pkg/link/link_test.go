package link

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

func TestBackoff(t *testing.T) {
	lo, hi := 500*time.Millisecond, 30*time.Second
	cases := []struct {
		n        int
		r        float64
		from, to time.Duration
	}{
		{0, 0, 250 * time.Millisecond, 250 * time.Millisecond},
		{0, 0.999, 250 * time.Millisecond, 500 * time.Millisecond},
		{1, 0.5, 500 * time.Millisecond, time.Second},
		{3, 0.999, 2 * time.Second, 4 * time.Second},
		{10, 0, 15 * time.Second, 15 * time.Second}, // capped at hi
		{1000, 0.999, 15 * time.Second, 30 * time.Second},
	}
	for _, c := range cases {
		if d := backoff(c.n, lo, hi, c.r); d < c.from || d > c.to {
			t.Errorf("backoff(%d, r=%v) = %v, want in [%v, %v]", c.n, c.r, d, c.from, c.to)
		}
	}
}

// TestReconnectBackoff: with no broker, attempts follow the jittered
// doubling (checked in a synctest bubble: the waits are virtual time).
func TestReconnectBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := Open(context.Background(), Config{Broker: "tcp://127.0.0.1:1", Fleet: "f", Device: "d",
			BackoffMin: time.Second, BackoffMax: 8 * time.Second, ConnectTimeout: time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// attempts at 0, then waits in [0.5,1], [1,2], [2,4], [4,8], [4,8]...:
		// within 60 s of virtual time, at least 60/8 and at most 60/0.5 attempts
		time.Sleep(60 * time.Second)
		synctest.Wait()
		n := l.Stats().Failures
		l.Close()
		if n < 8 || n > 20 {
			t.Fatalf("%d attempts in 60 s, want between 8 and 20 (backoff 1 s doubling to 8 s, jittered)", n)
		}
		t.Logf("%d attempts in 60 s", n)
	})
}

// TestResubscribe: a broker restarted without its state (no persistence)
// has forgotten the device's session; the link subscribes again on the
// new connection, so commands keep arriving.
func TestResubscribe(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx := context.Background()
	l, err := Open(ctx, testConfig(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan string, 4)
	if err := l.Subscribe(ctx, l.Topics().Cmd("+"), 1, func(m Message) { got <- string(m.Payload) }); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	b.Start()
	if !waitFor(10*time.Second, l.Changed, func() bool { return l.Stats().Connects >= 2 }) {
		t.Fatalf("no reconnection: %+v", l.Stats())
	}
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("cloud"))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer c.Disconnect(50)
	c.Publish(l.Topics().Cmd("ping"), 1, false, "after restart").Wait()
	select {
	case p := <-got:
		if p != "after restart" {
			t.Fatalf("got %q", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription was not restored after the broker restarted")
	}
}

// TestOfflineCommands: commands published while the device is away are
// kept by the broker for its persistent session and delivered when it
// comes back, even before it has subscribed again.
func TestOfflineCommands(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx := context.Background()
	first, err := Open(ctx, testConfig(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := first.Subscribe(ctx, first.Topics().Cmd("+"), 1, func(Message) {}); err != nil {
		t.Fatal(err)
	}
	first.Close() // the session stays with the broker (clean session false)
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("cloud"))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer c.Disconnect(50)
	for i := 0; i < 3; i++ {
		c.Publish(first.Topics().Cmd("ping"), 1, false, []byte{byte('0' + i)}).Wait()
	}
	got := make(chan string, 8)
	second, err := Open(ctx, testConfig(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := second.Subscribe(ctx, second.Topics().Cmd("+"), 1, func(m Message) { got <- string(m.Payload) }); err != nil {
		t.Fatal(err)
	}
	var all string
	for len(all) < 3 {
		select {
		case p := <-got:
			all += p
		case <-time.After(5 * time.Second):
			t.Fatalf("received %q of the 3 commands sent while offline", all)
		}
	}
	if all != "012" {
		t.Fatalf("commands %q, want 012 in order", all)
	}
}

func TestTopicMatches(t *testing.T) {
	for _, c := range []struct {
		f, t string
		ok   bool
	}{
		{"a/b/c", "a/b/c", true}, {"a/+/c", "a/x/c", true}, {"a/+", "a/x/c", false}, {"a/#", "a/x/c", true},
		{"a/#", "a", true /* the parent level too (MQTT 3.1.1, 4.7.1.2) */}, {"#", "a/b", true}, {"a/b", "a/b/c", false}, {"a/+/+", "a/b", false},
	} {
		if got := topicMatches(c.f, c.t); got != c.ok {
			t.Errorf("topicMatches(%q, %q) = %v", c.f, c.t, got)
		}
	}
}

// TestSubscribeWhileConnecting: subscriptions registered while the first
// connection is being made are all made on it.
func TestSubscribeWhileConnecting(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx := context.Background()
	for round := 0; round < 5; round++ {
		cfg := testConfig(b)
		cfg.ClientID = "race-" + string(rune('a'+round))
		l, err := Open(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 64)
		for i := 0; i < 20; i++ {
			if err := l.Subscribe(ctx, l.Topics().Cmd(string(rune('a'+i))), 1, func(m Message) { got <- m.Topic }); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(i%3) * time.Millisecond) // on purpose: spreads the subscriptions over the connection's set-up, the race under test
		}
		if err := l.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("pub"))
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
		for i := 0; i < 20; i++ {
			c.Publish(l.Topics().Cmd(string(rune('a'+i))), 1, false, "x").Wait()
		}
		seen := map[string]bool{}
		for len(seen) < 20 {
			select {
			case tp := <-got:
				seen[tp] = true
			case <-time.After(3 * time.Second):
				t.Fatalf("round %d: %d of 20 subscriptions work", round, len(seen))
			}
		}
		c.Disconnect(0)
		l.Close()
	}
}
