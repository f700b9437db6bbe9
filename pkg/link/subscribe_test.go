package link

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

// TestSubscribeAfterIDInUse: mochi-mqtt answers a SUBSCRIBE whose packet
// identifier is one of its own messages in flight to the client with 0x91
// (packet identifier in use). Both sides count identifiers up from 1 on a
// new connection, so a client that subscribes while the broker's first
// messages to it wait for their acknowledgements meets one refusal after
// another: this is how fleet serve, subscribing to its request topics
// while the devices' retained records flowed in on a loaded machine, was
// left without its chunk subscription and answered no chunk request for
// minutes (update/fleet SERVING.md). Here a proxy holds the link's
// acknowledgements while 40 messages are in flight to it, and gives them
// to the broker only after the eighth 0x91: a link that asks again at
// once gives up before then; one that waits between tries subscribes.
func TestSubscribeAfterIDInUse(t *testing.T) {
	if mosquittotest.Binary() == "" {
		t.Skip("mosquitto is not installed: apt-get install mosquitto mosquitto-clients (.ci/run installs it); the mochi-mqtt harness skips with it")
	}
	t.Setenv("EDGEINFER_TEST_BROKER", "mochi")
	// fleet serve's request subscriptions are shared ones; paho reports a
	// shared subscription's SUBACK under the filter without its
	// "$share/<group>/", which the link once missed, taking every 0x91
	// there for a grant.
	t.Run("plain", func(t *testing.T) { subscribeAfterIDInUse(t, "t/b") })
	t.Run("shared", func(t *testing.T) { subscribeAfterIDInUse(t, "$share/g/t/b") })
}

func subscribeAfterIDInUse(t *testing.T, filter string) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	p := newAckProxy(t, b.URL(), 8)
	ctx := context.Background()
	cfg := testConfig(b)
	cfg.Broker, cfg.CleanSession = p.url, true
	l, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var got atomic.Int64
	gotA := make(chan struct{}, 64)
	if err := l.Subscribe(ctx, "t/a", 1, func(Message) { got.Add(1); gotA <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}

	p.hold.Store(true)
	pub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("pub"))
	if tok := pub.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer pub.Disconnect(50)
	const inFlight = 40
	for range inFlight {
		pub.Publish("t/a", 1, false, "x").Wait()
	}
	deadline := time.After(10 * time.Second)
	for got.Load() < inFlight {
		select {
		case <-gotA:
		case <-deadline:
			t.Fatalf("the link received %d of %d messages", got.Load(), inFlight)
		}
	}
	// The broker has 40 messages in flight to the link, none acknowledged.

	gotB := make(chan string, 1)
	err = l.Subscribe(withTimeout(t, 20*time.Second), filter, 1, func(m Message) { gotB <- string(m.Payload) })
	if err != nil {
		t.Fatalf("subscribe after %d answers 0x91: %v", p.refused.Load(), err)
	}
	if n := p.refused.Load(); n < 8 {
		t.Fatalf("the broker answered 0x91 %d times; the test needs it to refuse 8 times before it frees identifiers", n)
	}
	pub.Publish("t/b", 1, false, "after 0x91").Wait()
	select {
	case m := <-gotB:
		if m != "after 0x91" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("subscribed to %s after the refusals, but t/b's message did not come", filter)
	}
	t.Logf("subscribed to %s after %d answers 0x91 (packet identifier in use)", filter, p.refused.Load())
}

// TestResubscribeWithoutSUBACK: a reconnection whose SUBACK never comes
// (a broker too busy to answer within ConnectTimeout, or a reply lost) is
// not a connection. The link used to log the failure and keep the
// connection: with a clean session it was up, answering keep-alives, and
// deaf to that filter until something else broke it, which is what fleet
// serve looked like in the stalled 10,000-device runs (update/fleet
// SCALE.md). Now it drops the connection and subscribes on the next one.
// Against mosquitto: the proxy swallows the reconnection's SUBSCRIBE, so
// the broker never has the subscription and no SUBACK comes. (Swallowing
// the SUBACK instead would not do: the broker has subscribed the client.)
func TestResubscribeWithoutSUBACK(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	p := newAckProxy(t, b.URL(), 0)
	ctx := context.Background()
	cfg := testConfig(b)
	// A second for a whole connection attempt, so that the one without
	// its SUBACK ends soon; on a loaded machine an attempt may run out of
	// it and the link tries again, which the waits below allow for.
	cfg.Broker, cfg.CleanSession, cfg.ConnectTimeout = p.url, true, time.Second
	l, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan string, 16)
	if err := l.Subscribe(ctx, "t/a", 1, func(m Message) { got <- string(m.Payload) }); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitConnected(withTimeout(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	pub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("pub"))
	if tok := pub.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer pub.Disconnect(50)
	pub.Publish("t/a", 1, false, "before").Wait()
	if m := receive(t, got, 5*time.Second); m != "before" {
		t.Fatalf("got %q", m)
	}

	filter := "t/a"
	p.dropSubscribeTo.Store(&filter)
	p.cut()
	// Whatever connection the link is on once it says connected must
	// carry t/a: publish until a message comes, for at most 30 s.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		if err := l.WaitConnected(withTimeout(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
		pub.Publish("t/a", 1, false, "after").Wait()
		select {
		case m := <-got:
			if m != "after" {
				t.Fatalf("got %q", m)
			}
			st := l.Stats()
			if p.dropped.Load() != 1 {
				t.Fatalf("the proxy swallowed no SUBSCRIBE to t/a: the test did not test")
			}
			if st.Failures == 0 {
				t.Fatalf("t/a's messages come, yet no connection attempt failed: %+v", st)
			}
			t.Logf("after a reconnection without its SUBACK: the attempt was dropped (%d failed), and the next subscribed: %d connections in all", st.Failures, st.Connects)
			return
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the link is connected (%d connections) and t/a's messages do not come: a connection without its subscription", l.Stats().Connects)
		}
	}
}

// receive is the next message of ch, failing the test after d.
func receive(t *testing.T, ch <-chan string, d time.Duration) string {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(d):
		t.Fatalf("no message within %v", d)
		return ""
	}
}

// ackProxy is a TCP proxy between one MQTT client and its broker that can
// hold the client's PUBACKs, and counts the broker's SUBACKs answering
// 0x91. It releases what it holds after release such SUBACKs.
type ackProxy struct {
	url     string
	hold    atomic.Bool
	refused atomic.Int64
	release int64
	// dropSubscribeTo, when set, is a filter whose next SUBSCRIBE never
	// reaches the broker; dropped counts those.
	dropSubscribeTo atomic.Pointer[string]
	dropped         atomic.Int64

	mu   sync.Mutex
	held [][]byte
	up   net.Conn // towards the broker
}

func newAckProxy(t *testing.T, brokerURL string, release int64) *ackProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ackProxy{url: "tcp://" + ln.Addr().String(), release: release}
	var wg sync.WaitGroup
	var conns []net.Conn
	var cmu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", brokerURL[len("tcp://"):])
			if err != nil {
				c.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, c, u)
			cmu.Unlock()
			p.mu.Lock()
			p.up = u
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(c, u, true); u.Close() }()
			go func() { defer wg.Done(); p.pipe(u, c, false); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	return p
}

// cut closes the connection to the broker: the client sees it lost.
func (p *ackProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.up != nil {
		p.up.Close()
	}
}

// pipe copies MQTT packets from src to dst: from the client (toBroker)
// PUBACKs are held while hold is set; from the broker, SUBACKs are read
// for 0x91.
func (p *ackProxy) pipe(src, dst net.Conn, toBroker bool) {
	r := bufio.NewReader(src)
	for {
		pk, err := readPacket(r)
		if err != nil {
			return
		}
		typ := pk.b[0] >> 4
		switch {
		case toBroker && typ == 4 && p.hold.Load(): // PUBACK
			p.mu.Lock()
			p.held = append(p.held, pk.b)
			p.mu.Unlock()
			continue
		case !toBroker && typ == 9 && len(pk.b) > pk.body+2 && pk.b[pk.body+2] == subackIDInUse: // SUBACK: id, then return codes
			if p.refused.Add(1) == p.release {
				p.mu.Lock()
				p.hold.Store(false)
				for _, a := range p.held {
					p.up.Write(a)
				}
				p.held = nil
				p.mu.Unlock()
			}
		}
		if f := p.dropSubscribeTo.Load(); toBroker && typ == 8 && f != nil && bytes.Contains(pk.b[pk.body:], []byte(*f)) && p.dropSubscribeTo.CompareAndSwap(f, nil) {
			p.dropped.Add(1)
			continue
		}
		p.mu.Lock() // in order with a release of held PUBACKs
		_, err = dst.Write(pk.b)
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// packet is one MQTT control packet: b whole, its variable header at body.
type packet struct {
	b    []byte
	body int
}

// readPacket reads one control packet: the fixed header's type byte, the
// remaining length (1–4 bytes of 7 bits), the rest.
func readPacket(r *bufio.Reader) (packet, error) {
	first, err := r.ReadByte()
	if err != nil {
		return packet{}, err
	}
	b := []byte{first}
	n, shift := 0, 0
	for {
		c, err := r.ReadByte()
		if err != nil {
			return packet{}, err
		}
		b = append(b, c)
		n |= int(c&0x7f) << shift
		if c&0x80 == 0 {
			break
		}
		if shift += 7; shift > 21 {
			return packet{}, errors.New("remaining length over 4 bytes")
		}
	}
	body := len(b)
	b = append(b, make([]byte, n)...)
	if _, err := io.ReadFull(r, b[body:]); err != nil {
		return packet{}, err
	}
	return packet{b: b, body: body}, nil
}
