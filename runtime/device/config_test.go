package device

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/serve"
)

// TestConfigErrors: each bad file is refused with ErrConfig and an error
// naming the field as the file spells it.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct{ json, want string }{
		{`{}`, "store: required"},
		{`{"store":"s.db","brokr":"tcp://h:1"}`, `unknown field "brokr"`},
		{`{"store":"s.db","broker":"tcp://h:1","fleet":"f","device":"d","telemetry_interval":"often"}`, "telemetry_interval"},
		{`{"store":"s.db","broker":"tcp://h:1","fleet":"f","device":"d","update":{"model":"m","image_root":"r","check_interval":"soon"}}`, "update.check_interval"},
		{`{"store":"s.db","broker":"tcp://h:1","fleet":"f","device":"d","telemetry_interval":"10ms"}`, "telemetry_interval: 10ms is below 100ms"},
		{`{"store":"s.db","update":{"model":"m","image_root":"r"}}`, "update: needs broker"},
		{`{"engine":{"models":[{"dir":"b"}]},"models":["m"]}`, "models: names models of the store"},
		{`{"store":"s.db","engine":{"store":"x.db"}}`, "engine.store"},
		{`{"store":"s.db","log_level":"loud"}`, "log_level"},
		{`{"store":"s.db","http":{"tls_cert_file":"c.pem"}}`, "http"},
		{`{"engine":{"models":[{"dir":"b"}]},"broker":"tcp://h:1","fleet":"f","device":"d"}`, "outbox: required when store is empty"},
	} {
		p := filepath.Join(dir, "device.json")
		if err := os.WriteFile(p, []byte(tc.json), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(p)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("case %d %s: %v, want ErrConfig naming %q", i, tc.json, err, tc.want)
		}
	}
}

// TestConfigJSON: the Go form and the file are one: a Config written as
// JSON reads back the same, durations spelt as Go prints them.
func TestConfigJSON(t *testing.T) {
	c := Config{Store: "s.db", Broker: "tcp://h:1", Fleet: "f", Device: "d", TelemetryInterval: Duration(1500 * time.Millisecond),
		HTTP:   &HTTP{Token: "t", DrainTimeout: Duration(20 * time.Second)},
		Update: &Update{Model: "m", ImageRoot: "r", CheckInterval: Duration(5 * time.Minute), Labels: map[string]string{"site": "b"}}}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"telemetry_interval":"1.5s"`) || !strings.Contains(string(b), `"check_interval":"5m0s"`) || !strings.Contains(string(b), `"token":"t"`) ||
		!strings.Contains(string(b), `"drain_timeout":"20s"`) {
		t.Fatalf("%s", b)
	}
	p := filepath.Join(t.TempDir(), "device.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.TelemetryInterval != c.TelemetryInterval || got.Update.CheckInterval != c.Update.CheckInterval || got.HTTP.Token != "t" || got.Update.Labels["site"] != "b" ||
		got.HTTP.serveConfig().DrainTimeout != 20*time.Second {
		t.Fatalf("read back %+v", got)
	}
}

// FuzzLoadConfig: the agent's file is an operator's input: any bytes give
// a Config that validates or an ErrConfig, never a panic.
func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte(`{"store":"s.db","broker":"tcp://h:1","fleet":"f","device":"d","http":{"addr":"127.0.0.1:0"},"update":{"model":"m","image_root":"r"}}`))
	f.Add([]byte(`{"telemetry_interval":"x","update":{"check_interval":"y"}}`))
	f.Add([]byte(`{"engine":{"models":[{"dir":"b"}]}}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "device.json")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(p)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("%q: error without ErrConfig: %v", b, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%q: LoadConfig accepted what Validate refuses: %v", b, err)
		}
	})
}

// TestOpenFailureStopsWhatStarted: an Open that fails after the store
// opened (here a TLS pair that does not load) says why, and leaves the
// store free for the next holder.
func TestOpenFailureStopsWhatStarted(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Store: filepath.Join(dir, "s.db"),
		HTTP: &HTTP{Config: serve.Config{Addr: "127.0.0.1:0", TLSCertFile: filepath.Join(dir, "none.pem"), TLSKeyFile: filepath.Join(dir, "none.key")}}}
	_, err := Open(t.Context(), cfg)
	if !errors.Is(err, serve.ErrConfig) || !strings.Contains(err.Error(), "tls_cert_file") {
		t.Fatalf("open with a missing TLS pair: %v", err)
	}
	cfg.HTTP = nil
	d, err := Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("the store was not released by the failed open: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}
