package link

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

// TestCommands sends commands as the cloud would and reads the answers.
func TestCommands(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx := context.Background()
	l, err := Open(ctx, testConfig(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st := openStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer st.Close()
	ob, err := OpenOutbox(ctx, st, l, OutboxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	tel := NewTelemetry(l, ob, TelemetryConfig{Interval: time.Hour}, Sources{})
	defer tel.Close()
	tel.Start()
	lv := new(slog.LevelVar)
	cmds := NewCommands(l, time.Second)
	cmds.RegisterBuiltins(Builtins{Telemetry: tel, LogLevel: lv, Models: func() []ModelVersion { return []ModelVersion{{Name: "m", Active: "2"}} }})
	cmds.Handle("panic", func(context.Context, json.RawMessage) (any, error) { panic("boom") })
	if err := l.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := cmds.Start(ctx); err != nil {
		t.Fatal(err)
	}

	answers := make(chan CommandResponse, 16)
	tele := make(chan Snapshot, 4)
	cloud := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("cloud"))
	if tok := cloud.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer cloud.Disconnect(50)
	cloud.Subscribe(l.Topics().CmdResponse("+"), 1, func(_ mqtt.Client, m mqtt.Message) {
		var r CommandResponse
		_ = json.Unmarshal(m.Payload(), &r)
		answers <- r
	}).Wait()
	cloud.Subscribe(l.Topics().Telemetry(), 1, func(_ mqtt.Client, m mqtt.Message) {
		var s Snapshot
		_ = json.Unmarshal(m.Payload(), &s)
		tele <- s
	}).Wait()

	cases := []struct {
		name, payload string
		ok            bool
	}{
		{"ping", `{"id":"p1"}`, true},
		{"list_models", `{"id":"l1"}`, true},
		{"set_interval", `{"id":"i1","args":{"interval":"2s"}}`, true},
		{"set_interval", `{"id":"i2","args":{"interval":"soon"}}`, false},
		{"set_log_level", `{"id":"v1","args":{"level":"debug"}}`, true},
		{"snapshot", `{"id":"s1"}`, true},
		{"reboot", `{"id":"u1"}`, false},
		{"ping", `not json`, false},
		{"panic", `{"id":"x1"}`, false},
	}
	for _, tc := range cases {
		cloud.Publish(l.Topics().Cmd(tc.name), 1, false, tc.payload).Wait()
		select {
		case r := <-answers:
			t.Logf("%s %s -> ok=%v %s %v", tc.name, tc.payload, r.OK, r.Error, r.Result)
			if r.OK != tc.ok || r.Command != tc.name {
				t.Errorf("%s %s: %+v", tc.name, tc.payload, r)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no answer", tc.name)
		}
	}
	if tel.Interval() != 2*time.Second || lv.Level() != slog.LevelDebug {
		t.Errorf("interval %v, level %v after the commands", tel.Interval(), lv.Level())
	}
	select {
	case s := <-tele:
		if s.Schema != TelemetrySchema || s.Seq == 0 || s.Device != "d" {
			t.Errorf("snapshot %+v", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the snapshot command published no telemetry")
	}
}

// TestRequest exercises the request/response helper the OTA transport
// uses (update.MQTTSource over Link.Request), against the cloud side
// (ServeRequests) run by two fleet servers sharing the load.
func TestRequest(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx := context.Background()
	l, err := Open(ctx, testConfig(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := [2]int{}
	var mu sync.Mutex
	for i := 0; i < 2; i++ {
		cfg := testConfig(b)
		cfg.Device = "fleet-server-" + string(rune('a'+i))
		srv, err := Open(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		if err := srv.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		// an echo server for tuf/chunk: answers with the body reversed
		err = srv.ServeRequests(ctx, "f", "servers", func(_ context.Context, device, topic string, p []byte) []byte {
			mu.Lock()
			served[i]++
			mu.Unlock()
			if device != "d" || topic != "tuf/chunk" {
				return []byte("bad " + device + " " + topic)
			}
			out := append([]byte(nil), p...)
			slices.Reverse(out)
			return out
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		got, err := l.Request(withTimeout(t, 5*time.Second), "tuf/chunk", []byte{1, 2, 3, byte(i)})
		if err != nil || string(got) != string([]byte{byte(i), 3, 2, 1}) {
			t.Fatalf("Request %d: %v %v", i, got, err)
		}
	}
	mu.Lock()
	t.Logf("requests served: %v (shared subscription)", served)
	if served[0]+served[1] != 20 || served[0] == 0 || served[1] == 0 {
		t.Errorf("served %v: want 20 split between both servers", served)
	}
	mu.Unlock()
	if got, err := l.Request(withTimeout(t, 5*time.Second), "tuf/meta", nil); err != nil || string(got) != "bad d tuf/meta" {
		t.Fatalf("tuf/meta: %q %v", got, err)
	}
	// with no server for the fleet, the request ends with its context
	other := testConfig(b)
	other.Fleet = "nobody-serves"
	lo, err := Open(ctx, other, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Close()
	if err := lo.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := lo.Request(withTimeout(t, 300*time.Millisecond), "tuf/chunk", []byte("x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered request: %v", err)
	}
	if _, err := l.Request(ctx, "tuf/+", nil); err == nil {
		t.Fatal("a wildcard request topic was accepted")
	}
}

// TestSharedOnceAfterReconnect: a request on a shared subscription is
// handled once, also on a connection made after the broker came back (the
// route was then filed twice and every request answered twice).
func TestSharedOnceAfterReconnect(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx := context.Background()
	l := openLink(t, testConfig(b))
	cfg := testConfig(b)
	cfg.Device = "fleet-server"
	srv := openLink(t, cfg)
	var served atomic.Int64
	if err := srv.ServeRequests(ctx, "f", "servers", func(_ context.Context, _, _ string, p []byte) []byte {
		served.Add(1)
		return p
	}); err != nil {
		t.Fatal(err)
	}
	ask := func(round string) {
		t.Helper()
		served.Store(0)
		for i := range 5 {
			if _, err := l.Request(withTimeout(t, 5*time.Second), "tuf/chunk", []byte{byte(i)}); err != nil {
				t.Fatalf("%s: request %d: %v", round, i, err)
			}
		}
		// One more request answered proves the server has seen every
		// copy of the five before it (answers go out in arrival order).
		if _, err := l.Request(withTimeout(t, 5*time.Second), "tuf/chunk", []byte{9}); err != nil {
			t.Fatal(err)
		}
		if n := served.Load(); n != 6 {
			t.Errorf("%s: 6 requests handled %d times", round, n)
		}
	}
	ask("first connection")
	before := srv.Stats().Connects
	b.Stop()
	b.Start()
	if !waitFor(10*time.Second, srv.Changed, func() bool { return srv.Stats().Connects > before }) {
		t.Fatal("the server did not reconnect")
	}
	if err := l.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	ask("after the broker restarted")
}
