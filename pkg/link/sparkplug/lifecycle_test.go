package sparkplug

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	pb "github.com/edgeinfer/edgeinfer/pkg/link/sparkplug/sparkplugpb"
	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// The node of these tests: spBv1.0/plant-7/.../cam-12, status on
// edgeinfer/v1/plant-7/cam-12/status.
var lifeCfg = Config{Group: "plant-7", Node: "cam-12"}

func linkConfig(broker string) link.Config {
	return link.Config{Broker: broker, Fleet: "plant-7", Device: "cam-12", BackoffMin: 50 * time.Millisecond,
		BackoffMax: 200 * time.Millisecond, KeepAlive: time.Second, ConnectTimeout: 5 * time.Second}
}

// host is a SCADA host application: one subscriber to everything the node
// and its link publish, recording in arrival order (all at QoS 0, so the
// broker forwards them in the order the node published them).
type host struct {
	mu      sync.Mutex
	got     []captured
	changed chan struct{} // closed and replaced on every message
}

func newHost(t *testing.T, b *mosquittotest.Broker) *host {
	t.Helper()
	h := &host{changed: make(chan struct{})}
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("scada-host"))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("host connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(50) })
	handler := func(_ mqtt.Client, m mqtt.Message) {
		if strings.Contains(m.Topic(), "CMD/") {
			return
		}
		h.mu.Lock()
		h.got = append(h.got, captured{m.Topic(), append([]byte(nil), m.Payload()...)})
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
	}
	if tok := c.Subscribe("#", 0, handler); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("host subscribe: %v", tok.Error())
	}
	return h
}

// wait returns the messages once done says they are complete; it fails
// the test if they are not within 30 s (a generous bound on a loaded
// machine: it waits on arrivals, never on time).
func (h *host) wait(t *testing.T, what string, done func([]captured) bool) []captured {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		got, changed := h.got, h.changed
		h.mu.Unlock()
		if done(got) {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("waiting for %s: %d messages:\n%s", what, len(got), describe(got))
		}
	}
}

// from returns the messages received from index i on.
func (h *host) from(i int) []captured {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]captured(nil), h.got[min(i, len(h.got)):]...)
}

func (h *host) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

// status reports whether c is the link's status message in state.
func status(c captured, state string) bool {
	return strings.HasSuffix(c.topic, "/status") && strings.Contains(string(c.payload), `"state":"`+state+`"`)
}

// after reports whether a message matching ok arrived at or after index i.
func after(i int, ok func(captured) bool) func([]captured) bool {
	return func(got []captured) bool {
		for _, c := range got[min(i, len(got)):] {
			if ok(c) {
				return true
			}
		}
		return false
	}
}

func isType(typ string) func(captured) bool {
	return func(c captured) bool { return strings.HasPrefix(c.topic, Namespace+"/plant-7/"+typ+"/") }
}

func decode(t *testing.T, c captured) *pb.Payload {
	t.Helper()
	var p pb.Payload
	if err := proto.Unmarshal(c.payload, &p); err != nil {
		t.Fatalf("%s: %v", c.topic, err)
	}
	return &p
}

func metricNamed(p *pb.Payload, name string) *pb.Payload_Metric {
	for _, m := range p.Metrics {
		if m.GetName() == name {
			return m
		}
	}
	return nil
}

func describe(got []captured) string {
	var b strings.Builder
	for _, c := range got {
		var p pb.Payload
		if strings.HasPrefix(c.topic, Namespace) && proto.Unmarshal(c.payload, &p) == nil {
			bd := ""
			if m := metricNamed(&p, "bdSeq"); m != nil {
				bd = fmt.Sprintf(" bdSeq=%d", m.GetLongValue())
			}
			fmt.Fprintf(&b, "  %s seq=%v%s\n", c.topic, p.Seq, bd)
		} else {
			fmt.Fprintf(&b, "  %s %.80s\n", c.topic, c.payload)
		}
	}
	return b.String()
}

// openNode opens a node (its bdSeq kept in st when st is not nil) and its
// link, and waits until the link is up and the node started.
func openNode(t *testing.T, b *mosquittotest.Broker, st *store.Store, birth func() link.Birth) (*Node, *link.Link) {
	t.Helper()
	node, err := NewNodeWith(lifeCfg, Options{State: st})
	if err != nil {
		t.Fatal(err)
	}
	l, err := link.OpenWith(t.Context(), linkConfig(b.URL()), node.Hooks(birth))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.WaitConnected(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := node.Start(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	return node, l
}

func testBirth() link.Birth {
	return link.Birth{SDKVersion: "v9.9.9", Board: "rpi5", Models: []link.ModelVersion{{Name: "tinylm", Active: "2", Previous: "1"}}}
}

// TestNDEATHOnClose: a clean disconnect makes the broker drop the will,
// so the node must publish its NDEATH itself, with the session's bdSeq,
// before the link says goodbye (Sparkplug B 3.0: "An Edge Node MUST
// publish an NDEATH before terminating the connection").
func TestNDEATHOnClose(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	h := newHost(t, b)
	_, l := openNode(t, b, nil, nil)
	got := h.wait(t, "the NBIRTH", after(0, isType("NBIRTH")))
	var birth *pb.Payload
	for _, c := range got {
		if isType("NBIRTH")(c) {
			birth = decode(t, c)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got = h.wait(t, "the offline status", after(0, func(c captured) bool { return status(c, "offline") }))
	var death *pb.Payload
	for _, c := range got {
		if status(c, "offline") {
			break
		}
		if isType("NDEATH")(c) {
			death = decode(t, c)
		}
	}
	if death == nil {
		t.Fatalf("no NDEATH before the link's goodbye:\n%s", describe(got))
	}
	bd, wantBd := metricNamed(death, "bdSeq"), metricNamed(birth, "bdSeq")
	if bd == nil || wantBd == nil || bd.GetLongValue() != wantBd.GetLongValue() {
		t.Errorf("NDEATH bdSeq %v, NBIRTH bdSeq %v: must match", bd, wantBd)
	}
}

// TestFirstBirthComplete: the first NBIRTH after start names the SDK and
// the board the agent knows, and each model's DBIRTH follows it on the
// first connection, before any telemetry.
func TestFirstBirthComplete(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	h := newHost(t, b)
	openNode(t, b, nil, testBirth)
	// the link publishes its online status after the births
	got := h.wait(t, "the online status", after(0, func(c captured) bool { return status(c, "online") }))
	var spb []captured
	for _, c := range got {
		if strings.HasPrefix(c.topic, Namespace) {
			spb = append(spb, c)
		}
	}
	if len(spb) != 2 || !isType("NBIRTH")(spb[0]) || spb[1].topic != Namespace+"/plant-7/DBIRTH/cam-12/tinylm" {
		t.Fatalf("want NBIRTH then DBIRTH/tinylm before the online status, got:\n%s", describe(got))
	}
	nb, db := decode(t, spb[0]), decode(t, spb[1])
	for name, want := range map[string]string{"Properties/sdk_version": "v9.9.9", "Properties/board": "rpi5"} {
		if m := metricNamed(nb, name); m.GetStringValue() != want {
			t.Errorf("NBIRTH %s = %q, want %q", name, m.GetStringValue(), want)
		}
	}
	if nb.GetSeq() != 0 || db.GetSeq() != 1 {
		t.Errorf("NBIRTH seq %d, DBIRTH seq %d: want 0 and 1", nb.GetSeq(), db.GetSeq())
	}
	if v := metricNamed(db, "Properties/version").GetStringValue(); v != "2" {
		t.Errorf("DBIRTH Properties/version %q, want 2", v)
	}
}

// TestBdSeqPersists: bdSeq goes on from the previous run's (0–255,
// wrapping), and the NBIRTH carries the will's.
func TestBdSeqPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	st, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	session := func(n *Node) uint64 {
		t.Helper()
		_, will, _, _ := n.will()
		var w pb.Payload
		if err := proto.Unmarshal(will, &w); err != nil {
			t.Fatal(err)
		}
		n.mu.Lock()
		nb := decode(t, captured{"NBIRTH", n.births(link.Snapshot{})[0].payload})
		n.mu.Unlock()
		if got, want := metricNamed(nb, "bdSeq").GetLongValue(), metricNamed(&w, "bdSeq").GetLongValue(); got != want {
			t.Errorf("NBIRTH bdSeq %d, will bdSeq %d", got, want)
		}
		return metricNamed(&w, "bdSeq").GetLongValue()
	}
	newNode := func() *Node {
		n, err := NewNodeWith(lifeCfg, Options{State: st})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	first := newNode()
	a := session(first)
	b := session(first) // a reconnection: a new MQTT session
	c := session(newNode())
	d := session(newNode())
	if b != (a+1)%256 || c != (b+1)%256 || d != (c+1)%256 {
		t.Errorf("bdSeq over two sessions and two restarts: %d %d %d %d, want consecutive", a, b, c, d)
	}
	for range 255 - d {
		session(newNode())
	}
	if last, wrapped := session(newNode()), session(newNode()); last != 0 || wrapped != 1 {
		t.Errorf("after 255: %d then %d, want 0 then 1", last, wrapped)
	}
}

// TestNoStaleSeqAfterRebirth publishes from many goroutines while
// rebirths happen, and checks at the host that every NBIRTH has seq 0 and
// every other message the next seq (mod 256): no message numbered in an
// old sequence arrives after a new NBIRTH, and none out of order.
func TestNoStaleSeqAfterRebirth(t *testing.T) {
	// no limit on the messages queued for the host, so none is dropped
	b := mosquittotest.Start(t, mosquittotest.Options{Extra: "max_queued_messages 0\n"})
	h := newHost(t, b)
	node, l := openNode(t, b, nil, testBirth)
	h.wait(t, "the online status", after(0, func(c captured) bool { return status(c, "online") }))
	const publishers, each, rebirths = 8, 40, 30
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, publishers+1)
	for g := range publishers {
		wg.Go(func() {
			for i := range each {
				if err := node.Publish(ctx, snapshot(float64(g*each+i))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range rebirths {
			if err := node.Rebirth(ctx); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := h.wait(t, "the offline status", after(0, func(c captured) bool { return status(c, "offline") }))
	var births, msgs, bad int
	next := uint64(0)
	for i, c := range got {
		if !strings.HasPrefix(c.topic, Namespace) || isType("NDEATH")(c) {
			continue
		}
		seq := decode(t, c).GetSeq()
		msgs++
		switch {
		case isType("NBIRTH")(c):
			births++
			if seq != 0 {
				bad++
				t.Errorf("message %d: NBIRTH seq %d, want 0", i, seq)
			}
			next = 1
		case seq != next:
			bad++
			if bad <= 10 {
				t.Errorf("message %d: %s seq %d, want %d", i, c.topic, seq, next)
			}
			next = (seq + 1) % 256
		default:
			next = (next + 1) % 256
		}
	}
	t.Logf("%d Sparkplug messages, %d NBIRTHs, %d out of sequence", msgs, births, bad)
	if want := 2*publishers*each + 2*(rebirths+1); msgs != want {
		t.Errorf("%d messages, want %d", msgs, want)
	}
}

// TestLifecycleTahu captures three sessions of a node whose bdSeq is kept
// in a store: start → data → clean stop; start → data → SIGKILL (in a
// child process: the broker fires the will); start → clean stop. Eclipse
// Tahu's decoder reads every payload, and each session must be
// NBIRTH(bdSeq=n) … NDEATH(bdSeq=n), with n+1 for the next.
func TestLifecycleTahu(t *testing.T) {
	if emu := os.Getenv("EDGEINFER_EMULATED"); emu != "" {
		// `go test -exec` runs this binary under qemu-user; re-executing
		// os.Args[0] would start a foreign binary natively. The native run
		// of the suite covers the child-process tests.
		t.Skipf("child processes need a native test binary (running under %s)", emu)
	}
	tahuDir := tahu(t)
	b := mosquittotest.Start(t, mosquittotest.Options{})
	h := newHost(t, b)
	path := filepath.Join(t.TempDir(), "outbox.db")
	offline := func(c captured) bool { return status(c, "offline") }

	// session 1: in this process, closed cleanly
	st, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	node, l := openNode(t, b, st, testBirth)
	if err := node.Publish(t.Context(), snapshot(31.5)); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "session 1's DDATA", after(0, isType("DDATA")))
	mark := h.len()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "session 1's offline status", after(mark, offline))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// session 2: a child process, killed once its data is out
	mark = h.len()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLifecycleChild$")
	cmd.Env = append(os.Environ(), "SPARKPLUG_CHILD_STORE="+path, "SPARKPLUG_CHILD_BROKER="+b.URL())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "published" {
	}
	h.wait(t, "session 2's DDATA", after(mark, isType("DDATA")))
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	h.wait(t, "session 2's NDEATH (the will)", after(mark, isType("NDEATH")))

	// session 3: in this process again, closed cleanly
	mark = h.len()
	st, err = store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, l = openNode(t, b, st, testBirth)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "session 3's offline status", after(mark, offline))

	var spb []captured
	for _, c := range h.from(0) {
		if strings.HasPrefix(c.topic, Namespace) {
			spb = append(spb, c)
		}
	}
	msgs := tahuDecode(t, tahuDir, spb)
	type session struct {
		birth, death string // bdSeq as Tahu decodes it
		types        []string
	}
	var sessions []*session
	for i, m := range msgs {
		typ := strings.Split(m.Topic, "/")[2]
		bdSeq := ""
		for _, pm := range m.Payload.Metrics {
			if pm.Name == "bdSeq" {
				bdSeq = fmt.Sprint(pm.Value)
			}
		}
		switch typ {
		case "NBIRTH":
			if len(sessions) > 0 && sessions[len(sessions)-1].death == "" {
				t.Errorf("message %d: NBIRTH before the previous session's NDEATH", i)
			}
			sessions = append(sessions, &session{birth: bdSeq})
			for _, pm := range m.Payload.Metrics {
				if (pm.Name == "Properties/sdk_version" || pm.Name == "Properties/board") && fmt.Sprint(pm.Value) == "" {
					t.Errorf("message %d: NBIRTH with an empty %s", i, pm.Name)
				}
			}
		case "NDEATH":
			if len(sessions) == 0 || sessions[len(sessions)-1].death != "" {
				t.Fatalf("message %d: NDEATH outside a session", i)
			}
			sessions[len(sessions)-1].death = bdSeq
		default:
			if len(sessions) == 0 || sessions[len(sessions)-1].death != "" {
				t.Fatalf("message %d: %s outside a session", i, m.Topic)
			}
		}
		s := sessions[len(sessions)-1]
		s.types = append(s.types, typ)
	}
	if len(sessions) != 3 {
		t.Fatalf("%d sessions, want 3:\n%s", len(sessions), describe(spb))
	}
	for i, s := range sessions {
		t.Logf("session %d: bdSeq %s/%s %v", i+1, s.birth, s.death, s.types)
		if s.birth != fmt.Sprint(i) || s.death != s.birth {
			t.Errorf("session %d: NBIRTH bdSeq %q, NDEATH bdSeq %q, want %d for both", i+1, s.birth, s.death, i)
		}
		if len(s.types) < 3 || s.types[1] != "DBIRTH" {
			t.Errorf("session %d: %v, want NBIRTH, DBIRTH, … NDEATH", i+1, s.types)
		}
	}
}

// TestLifecycleChild is session 2 of TestLifecycleTahu (skipped
// otherwise): it publishes a birth and data, says so, and waits to be
// killed.
func TestLifecycleChild(t *testing.T) {
	path := os.Getenv("SPARKPLUG_CHILD_STORE")
	if path == "" {
		t.Skip("runs only as a child process of another test") // the Sparkplug lifecycle test
	}
	st, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := linkConfig(os.Getenv("SPARKPLUG_CHILD_BROKER"))
	node, err := NewNodeWith(lifeCfg, Options{State: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := link.OpenWith(ctx, cfg, node.Hooks(testBirth))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if err := node.Start(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := node.Publish(ctx, snapshot(40)); err != nil {
		t.Fatal(err)
	}
	fmt.Println("published")
	select {} // until the parent's SIGKILL
}

// tahuDecode has Eclipse Tahu's decoder read the payloads.
func tahuDecode(t *testing.T, dir string, msgs []captured) []decoded {
	t.Helper()
	var lines strings.Builder
	for _, c := range msgs {
		fmt.Fprintf(&lines, "%s %s\n", c.topic, hex.EncodeToString(c.payload))
	}
	in := filepath.Join(t.TempDir(), "payloads.txt")
	if err := os.WriteFile(in, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", "testdata/decode.js", dir, in).CombinedOutput()
	if err != nil {
		t.Fatalf("Tahu's decoder: %v\n%s", err, out)
	}
	var ds []decoded
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var d decoded
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		ds = append(ds, d)
	}
	if len(ds) != len(msgs) {
		t.Fatalf("Tahu decoded %d payloads of %d", len(ds), len(msgs))
	}
	return ds
}
