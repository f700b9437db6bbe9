package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update/link"
	"github.com/edgeinfer/edgeinfer/update/link/mosquittotest"
)

func TestAgentConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ json, want string }{
		{`{"broker":"tcp://127.0.0.1:1","fleet":"f","device":"d"}`, "store: required"},
		{`{"store":"s.db","broker":"tcp://127.0.0.1:1","fleet":"f","device":"d","telemetry_intervall":"1s"}`, `unknown field "telemetry_intervall"`},
		{`{"store":"s.db","broker":"tcp://127.0.0.1:1","fleet":"f","device":"d","telemetry_interval":"often"}`, "telemetry_interval"},
		{`{"store":"s.db","broker":"tcp://127.0.0.1:1","fleet":"f","device":"d/x"}`, "device"},
		{`{"store":"s.db","broker":"http://127.0.0.1:1","fleet":"f","device":"d"}`, "scheme"},
		{`{"store":"s.db","broker":"tcp://127.0.0.1:1","fleet":"f","device":"d","log_level":"loud"}`, "log_level"},
		{`{"store":"s.db","broker":"ssl://h:1","fleet":"f","device":"d","cert_file":"c.pem"}`, "cert_file and key_file"},
	}
	for i, tc := range cases {
		p := filepath.Join(dir, "agent.json")
		if err := os.WriteFile(p, []byte(tc.json), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := loadAgentConfig(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("case %d: %v, want an error naming %q", i, err, tc.want)
		}
	}
}

// TestAgent runs the agent against a real broker (with an empty store:
// the link alone) and watches edgeinfer/v1/# as mosquitto_sub would:
// birth, telemetry, a ping answer, and the offline status on shutdown.
func TestAgent(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Persistence: true})
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "models.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	cfgFile := filepath.Join(dir, "agent.json")
	cfgJSON := `{"store":"` + filepath.Join(dir, "models.db") + `","broker":"` + b.URL() + `","fleet":"f","device":"d","telemetry_interval":"200ms"}`
	if err := os.WriteFile(cfgFile, []byte(cfgJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string][]string{}
	watch := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("watch"))
	if tok := watch.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer watch.Disconnect(50)
	watch.Subscribe("edgeinfer/v1/#", 1, func(_ mqtt.Client, m mqtt.Message) {
		mu.Lock()
		seen[m.Topic()] = append(seen[m.Topic()], string(m.Payload()))
		mu.Unlock()
	}).Wait()
	has := func(topic, sub string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range seen[topic] {
			if strings.Contains(p, sub) {
				return true
			}
		}
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() {
		cfg, lcfg, err := loadAgentConfig(cfgFile)
		if err != nil {
			done <- err
			return
		}
		done <- agent(ctx, &out, cfg, lcfg, new(slog.LevelVar), slog.New(slog.DiscardHandler))
	}()
	top := link.NewTopics("f", "d")
	wait := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("no %s; seen %v", what, seen)
			}
		}
	}
	wait("birth", func() bool { return has(top.Status(), `"state":"online"`) })
	wait("telemetry", func() bool { return has(top.Telemetry(), `"schema":"edgeinfer.telemetry/1"`) })
	watch.Publish(top.Cmd("ping"), 1, false, `{"id":"p1"}`).Wait()
	wait("ping answer", func() bool { return has(top.CmdResponse("ping"), `"id":"p1","command":"ping","ok":true`) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wait("offline status", func() bool {
		return has(top.Status(), `"state":"offline","fleet":"f","device":"d","reason":"shutdown"`)
	})
	wait("start and stop events", func() bool {
		return has(top.Events(), `"event":"agent_started"`) && has(top.Events(), `"event":"agent_stopping"`)
	})
	var snap link.Snapshot
	mu.Lock()
	_ = json.Unmarshal([]byte(seen[top.Telemetry()][0]), &snap)
	mu.Unlock()
	if snap.Seq == 0 || snap.Power.Value == nil && snap.Power.Reason == "" {
		t.Errorf("telemetry %+v", snap)
	}
	t.Logf("%s", out.String())
}
