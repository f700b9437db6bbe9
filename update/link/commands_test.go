package link

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/update/link/mosquittotest"
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
// uses: the cloud answers on res/<name>/<id>.
func TestRequest(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx := context.Background()
	l, err := Open(ctx, testConfig(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.WaitConnected(withTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	cloud := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("cloud"))
	if tok := cloud.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer cloud.Disconnect(50)
	// an echo server for "chunk" requests: answers with the body reversed
	cloud.Subscribe("edgeinfer/v1/+/+/req/chunk/+", 1, func(c mqtt.Client, m mqtt.Message) {
		b := append([]byte(nil), m.Payload()...)
		for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
			b[i], b[j] = b[j], b[i]
		}
		resp := m.Topic()[:len(m.Topic())-len("req/chunk/")-24] + "res/chunk/" + m.Topic()[len(m.Topic())-24:]
		c.Publish(resp, 1, false, b)
	}).Wait()
	got, err := l.Request(withTimeout(t, 5*time.Second), "chunk", []byte{1, 2, 3, 0})
	if err != nil || string(got) != string([]byte{0, 3, 2, 1}) {
		t.Fatalf("Request: %v %v", got, err)
	}
	_, err = l.Request(withTimeout(t, 300*time.Millisecond), "nobody", []byte("x"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered request: %v", err)
	}
}
