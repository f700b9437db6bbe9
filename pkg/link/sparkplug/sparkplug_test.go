package sparkplug

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	pb "github.com/edgeinfer/edgeinfer/pkg/link/sparkplug/sparkplugpb"
)

// tahu returns the sparkplug-payload package directory: $EDGEINFER_TAHU,
// else the checks' npm cache (.ci/run installs it there).
func tahu(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: Tahu's decoder cannot run")
	}
	dir := os.Getenv("EDGEINFER_TAHU")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "edgeinfer-checks", "npm", "tahu", "node_modules", "sparkplug-payload")
	}
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		t.Skipf("Eclipse Tahu's sparkplug-payload not found at %s: npm install --ignore-scripts sparkplug-payload@1.0.3 in %s (.ci/run does), or set EDGEINFER_TAHU", dir, filepath.Dir(filepath.Dir(dir)))
	}
	return dir
}

type captured struct {
	topic   string
	payload []byte
}

type decoded struct {
	Topic   string `json:"topic"`
	Payload struct {
		Timestamp string `json:"timestamp"`
		Seq       string `json:"seq"`
		Metrics   []struct {
			Name   string `json:"name"`
			Alias  string `json:"alias"`
			Type   string `json:"type"`
			Value  any    `json:"value"`
			IsNull bool   `json:"isNull"`
		} `json:"metrics"`
	} `json:"payload"`
}

func snapshot(ttftP99 float64) link.Snapshot {
	return link.Snapshot{SDKVersion: "v0.1.0", Board: "test board", UptimeS: 12.5,
		Power:  link.Sensor{Unit: "W", Reason: "no sensor"},
		Models: []link.ModelVersion{{Name: "tinylm", Active: "2", Previous: "1"}},
		Requests: []link.RequestStats{{Model: "tinylm", Class: "interactive", Outcomes: map[string]uint64{"completed": 7, "failed": 1},
			OutputTokens: 224, GoodputTokS: 20, TTFT: link.Dist{N: 8, P99: &ttftP99}}},
		Outbox: link.OutboxTelemetry{Depth: 3}}
}

// TestTahuDecodes runs a node against mosquitto, captures NBIRTH, DBIRTH,
// NDATA, DDATA, a rebirth and the NDEATH will, and has Eclipse Tahu's
// decoder read them.
func TestTahuDecodes(t *testing.T) {
	tahuDir := tahu(t)
	b := mosquittotest.Start(t, mosquittotest.Options{})
	var mu sync.Mutex
	var got []captured
	arrived := make(chan struct{}, 1) // a message was captured
	host := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("scada"))
	if tok := host.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer host.Disconnect(50)
	host.Subscribe("spBv1.0/#", 0, func(_ mqtt.Client, m mqtt.Message) {
		if strings.Contains(m.Topic(), "CMD/") {
			return // the host's own commands
		}
		mu.Lock()
		got = append(got, captured{m.Topic(), append([]byte(nil), m.Payload()...)})
		mu.Unlock()
		select {
		case arrived <- struct{}{}:
		default: // a wake-up is already pending
		}
	}).Wait()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	waitN := func(n int) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for count() < n {
			select {
			case <-arrived:
			case <-deadline:
				t.Fatalf("%d messages, want %d", count(), n)
			}
		}
	}

	node, err := NewNode(Config{Group: "plant-7", Node: "cam-12"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := link.Config{Broker: b.URL(), Fleet: "plant-7", Device: "cam-12", BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, KeepAlive: time.Second}
	l, err := link.OpenWith(ctx, cfg, node.Hooks(nil))
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
	waitN(1)                                                  // NBIRTH (no models known yet)
	if err := node.Publish(ctx, snapshot(31.5)); err != nil { // NDATA + DBIRTH
		t.Fatal(err)
	}
	if err := node.Publish(ctx, snapshot(33.25)); err != nil { // NDATA + DDATA
		t.Fatal(err)
	}
	waitN(5)
	// a host asks for a rebirth
	cmd, _ := proto.Marshal(&pb.Payload{Timestamp: proto.Uint64(nowMS()), Metrics: []*pb.Payload_Metric{{Name: proto.String(RebirthMetric),
		Datatype: proto.Uint32(uint32(pb.DataType_Boolean)), Value: &pb.Payload_Metric_BooleanValue{BooleanValue: true}}}})
	host.Publish(node.Topic("NCMD", ""), 0, false, cmd).Wait()
	waitN(7) // NBIRTH + DBIRTH
	// the connection dies uncleanly: another client takes the client id,
	// and the broker publishes the will (NDEATH)
	thief := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(b.URL()).SetClientID("plant-7.cam-12").SetAutoReconnect(false))
	if tok := thief.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	waitN(8)
	thief.Disconnect(0)
	l.Close()

	mu.Lock()
	var lines strings.Builder
	for _, c := range got {
		fmt.Fprintf(&lines, "%s %s\n", c.topic, hex.EncodeToString(c.payload))
	}
	mu.Unlock()
	in := filepath.Join(t.TempDir(), "payloads.txt")
	if err := os.WriteFile(in, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", "testdata/decode.js", tahuDir, in).CombinedOutput()
	if err != nil {
		t.Fatalf("Tahu's decoder: %v\n%s", err, out)
	}
	var msgs []decoded
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var d decoded
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		msgs = append(msgs, d)
	}
	// After the takeover the link reconnects, and its next session may
	// show: an NBIRTH with seq 0, or, where l.Close came before that birth
	// (a slow machine: qemu), the clean close's NDEATH. Either carries the
	// next bdSeq. Check the first eight messages below.
	if len(msgs) > 8 {
		next := msgs[8]
		switch next.Topic {
		case "spBv1.0/plant-7/NBIRTH/cam-12":
			if next.Payload.Seq != "0" {
				t.Errorf("the next session's NBIRTH has seq %s, want 0", next.Payload.Seq)
			}
		case "spBv1.0/plant-7/NDEATH/cam-12":
		default:
			t.Errorf("after the NDEATH: %s, want the next session's NBIRTH or NDEATH", next.Topic)
		}
		for _, pm := range next.Payload.Metrics {
			if pm.Name == "bdSeq" && fmt.Sprint(pm.Value) != "1" {
				t.Errorf("the next session's bdSeq is %v, want 1", pm.Value)
			}
		}
		msgs = msgs[:8]
	}
	want := []string{"NBIRTH/cam-12", "NDATA/cam-12", "DBIRTH/cam-12/tinylm", "NDATA/cam-12", "DDATA/cam-12/tinylm", "NBIRTH/cam-12", "DBIRTH/cam-12/tinylm", "NDEATH/cam-12"}
	wantSeq := []string{"0", "1", "2", "3", "4", "0", "1", ""}
	aliases := map[string]string{} // alias -> name, from births
	var birthBdSeq, deathBdSeq any
	for i, m := range msgs {
		t.Logf("%s seq=%s metrics=%d", m.Topic, m.Payload.Seq, len(m.Payload.Metrics))
		if i >= len(want) || m.Topic != "spBv1.0/plant-7/"+want[i] {
			t.Fatalf("message %d is %s, want …%s", i, m.Topic, want[i])
		}
		if m.Payload.Seq != wantSeq[i] && !(wantSeq[i] == "" && m.Payload.Seq == "") {
			t.Errorf("%s: seq %q, want %q", m.Topic, m.Payload.Seq, wantSeq[i])
		}
		for _, pm := range m.Payload.Metrics {
			switch {
			case strings.Contains(m.Topic, "BIRTH"):
				if pm.Name == "" || pm.Alias == "" {
					t.Errorf("%s: birth metric without name or alias: %+v", m.Topic, pm)
				}
				aliases[pm.Alias] = pm.Name
				if pm.Name == "bdSeq" {
					birthBdSeq = pm.Value
				}
			case strings.Contains(m.Topic, "DATA"):
				if pm.Name != "" || aliases[pm.Alias] == "" {
					t.Errorf("%s: data metric %+v: want an alias bound at birth and no name", m.Topic, pm)
				}
			case strings.Contains(m.Topic, "NDEATH"):
				deathBdSeq = pm.Value
			}
		}
	}
	if len(msgs) != len(want) {
		t.Fatalf("%d messages, want %d", len(msgs), len(want))
	}
	if fmt.Sprint(birthBdSeq) != fmt.Sprint(deathBdSeq) || birthBdSeq == nil {
		t.Errorf("NDEATH bdSeq %v, NBIRTH bdSeq %v: must match", deathBdSeq, birthBdSeq)
	}
	// the DDATA's ttft p99 decodes to what was sent
	found := false
	for _, pm := range msgs[4].Payload.Metrics {
		if aliases[pm.Alias] == "interactive/ttft_ms/p99" {
			found = fmt.Sprint(pm.Value) == "33.25"
			if !found {
				t.Errorf("ttft p99 decoded as %v (%s), want 33.25", pm.Value, pm.Type)
			}
		}
		if aliases[pm.Alias] == "realtime/ttft_ms/p99" && pm.Value != nil { // Tahu decodes is_null as a null value
			t.Errorf("an empty distribution must be null: %+v", pm)
		}
	}
	if !found {
		t.Error("no interactive/ttft_ms/p99 in DDATA")
	}
}

func TestSeqWraps(t *testing.T) {
	n, _ := NewNode(Config{Group: "g", Node: "n"})
	var last uint64
	for i := 0; i < 300; i++ {
		n.mu.Lock()
		b := n.payloadLocked("", nil, false)
		n.mu.Unlock()
		var p pb.Payload
		if err := proto.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		if i > 0 && p.GetSeq() != (last+1)%256 {
			t.Fatalf("seq %d after %d", p.GetSeq(), last)
		}
		last = p.GetSeq()
	}
}
