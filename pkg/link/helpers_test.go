package link

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// payloadSeq extracts "seq":N from a JSON payload (fast path for tests).
func payloadSeq(b []byte) (uint64, bool) {
	i := bytes.Index(b, []byte(`"seq":`))
	if i < 0 {
		return 0, false
	}
	j := i + 6
	k := j
	for k < len(b) && b[k] >= '0' && b[k] <= '9' {
		k++
	}
	n, err := strconv.ParseUint(string(b[j:k]), 10, 64)
	return n, err == nil
}

// seqPayload is a test payload of at least size bytes carrying seq.
func seqPayload(seq uint64, size int) []byte {
	b := make([]byte, 0, size+32)
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"pad":"`...)
	for len(b) < size-2 {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}

// receiver is a persistent-session subscriber (a plain paho client, as
// the cloud side would run) that counts what it receives by seq.
type receiver struct {
	client mqtt.Client
	dedup  *Dedup

	mu      sync.Mutex
	got     map[uint64]int // seq -> times received
	topics  map[uint64]string
	order   []uint64 // first receptions in arrival order
	ooo     int
	dupFlag int           // duplicate receptions the broker marked as redeliveries (DUP)
	changed chan struct{} // closed and replaced on every reception
}

// Changed returns a channel closed at the receiver's next reception.
func (r *receiver) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

func newReceiver(t *testing.T, b *mosquittotest.Broker, id, filter string) *receiver {
	t.Helper()
	r := &receiver{dedup: NewDedup(0), got: map[uint64]int{}, topics: map[uint64]string{}, changed: make(chan struct{})}
	subscribed := make(chan error, 1)
	handler := func(_ mqtt.Client, m mqtt.Message) {
		seq, ok := payloadSeq(m.Payload())
		if !ok {
			return
		}
		dup, ooo := r.dedup.Seen("d", seq)
		r.mu.Lock()
		r.got[seq]++
		if dup && m.Duplicate() {
			r.dupFlag++
		}
		if !dup {
			r.order = append(r.order, seq)
			r.topics[seq] = m.Topic()
			if ooo {
				r.ooo++
			}
		}
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
	opts := mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID(id).SetCleanSession(false).
		SetAutoReconnect(true).SetMaxReconnectInterval(200 * time.Millisecond).SetConnectRetry(true).
		SetConnectRetryInterval(100 * time.Millisecond).SetProtocolVersion(4).
		SetOnConnectHandler(func(c mqtt.Client) {
			tok := c.Subscribe(filter, 1, handler)
			go func() {
				tok.Wait()
				select {
				case subscribed <- tok.Error():
				default: // a later connection's subscription: nobody waits for it
				}
			}()
		})
	r.client = mqtt.NewClient(opts)
	if tok := r.client.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("receiver connect: %v", tok.Error())
	}
	t.Cleanup(func() { r.client.Disconnect(100) })
	// wait for the SUBACK of the subscription made by the connect handler
	select {
	case err := <-subscribed:
		if err != nil {
			t.Fatalf("receiver subscribe: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("receiver: no SUBACK within 10 s")
	}
	return r
}

// distinct is how many different seqs arrived.
func (r *receiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// tally counts, for seqs 1..n, the lost ones and the duplicates.
func (r *receiver) tally(n uint64) (received, lost, dups, ooo int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := uint64(1); s <= n; s++ {
		c := r.got[s]
		if c == 0 {
			lost++
		} else {
			received++
			dups += c - 1
		}
	}
	return received, lost, dups, r.ooo
}

// waitFor waits until cond holds or d passes, checking it again each time
// changed's channel closes (the Changed of a Link, an Outbox or a
// receiver: whatever cond reads).
func waitFor(d time.Duration, changed func() <-chan struct{}, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		ch := changed() // before cond: a change after the check closes ch
		if cond() {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return cond()
		}
	}
}

func openStore(t *testing.T, path string) *store.Store { return openStoreB(t, path) }

func openStoreB(t testing.TB, path string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openLink opens a link with cfg, closed when the test ends, and waits
// for its connection.
func openLink(t *testing.T, cfg Config) *Link {
	t.Helper()
	l, err := Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	return l
}

func testConfig(b *mosquittotest.Broker) Config {
	return Config{Broker: b.URL(), Fleet: "f", Device: "d", BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, ConnectTimeout: 3 * time.Second}
}
