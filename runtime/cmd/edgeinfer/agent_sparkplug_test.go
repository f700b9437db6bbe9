package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	pb "github.com/edgeinfer/edgeinfer/pkg/link/sparkplug/sparkplugpb"
)

// TestAgentSparkplugLifecycle runs the agent with a Sparkplug section
// twice on the same files, stopping it as SIGTERM does (its context
// ends): each run is NBIRTH(bdSeq=n) with the SDK version and board …
// NDEATH(bdSeq=n) before the disconnect, and the second run's bdSeq is
// the first's plus one.
func TestAgentSparkplugLifecycle(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "agent.json")
	cfgJSON, _ := json.Marshal(map[string]any{"store": filepath.Join(dir, "models.db"), "broker": b.URL(), "fleet": "f", "device": "d",
		"board": "sim", "telemetry_interval": "1h", "sparkplug": map[string]string{"group": "plant"}})
	if err := os.WriteFile(cfgFile, cfgJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	type msg struct {
		typ string
		p   *pb.Payload
	}
	msgs := make(chan msg, 64)
	watch := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("scada"))
	if tok := watch.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer watch.Disconnect(50)
	watch.Subscribe("spBv1.0/plant/+/d", 0, func(_ mqtt.Client, m mqtt.Message) {
		var p pb.Payload
		if err := proto.Unmarshal(m.Payload(), &p); err != nil {
			t.Errorf("%s: %v", m.Topic(), err)
			return
		}
		msgs <- msg{strings.Split(m.Topic(), "/")[2], &p}
	}).Wait()
	next := func(typ string) *pb.Payload {
		t.Helper()
		timeout := time.NewTimer(30 * time.Second)
		defer timeout.Stop()
		for {
			select {
			case m := <-msgs:
				if m.typ != "NBIRTH" && m.typ != "NDEATH" {
					continue // data a telemetry tick may publish
				}
				if m.typ != typ {
					t.Fatalf("got %s, want %s", m.typ, typ)
				}
				return m.p
			case <-timeout.C:
				t.Fatalf("no %s", typ)
				return nil
			}
		}
	}
	metric := func(p *pb.Payload, name string) *pb.Payload_Metric {
		for _, m := range p.Metrics {
			if m.GetName() == name {
				return m
			}
		}
		t.Fatalf("no metric %s", name)
		return nil
	}
	for run := range uint64(2) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			cfg, err := loadAgentConfig(cfgFile)
			if err != nil {
				done <- err
				return
			}
			done <- agent(ctx, new(bytes.Buffer), withLogger(cfg, slog.New(slog.DiscardHandler)))
		}()
		birth := next("NBIRTH")
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		death := next("NDEATH")
		if got := metric(birth, "bdSeq").GetLongValue(); got != run {
			t.Errorf("run %d: NBIRTH bdSeq %d, want %d", run+1, got, run)
		}
		if got := metric(death, "bdSeq").GetLongValue(); got != run {
			t.Errorf("run %d: NDEATH bdSeq %d, want %d", run+1, got, run)
		}
		if v := metric(birth, "Properties/sdk_version").GetStringValue(); v == "" {
			t.Errorf("run %d: NBIRTH without sdk_version", run+1)
		}
		if v := metric(birth, "Properties/board").GetStringValue(); v != "sim" {
			t.Errorf("run %d: NBIRTH board %q, want sim", run+1, v)
		}
	}
}
