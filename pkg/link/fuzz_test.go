package link

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
)

// FuzzCommand runs arbitrary payloads through the command path: it must
// never panic, and every response must marshal and echo a valid id only.
func FuzzCommand(f *testing.F) {
	for _, s := range []string{`{"id":"1"}`, `{"id":"2","args":{"interval":"5s"}}`, `{"id":"3","args":{"level":"debug"}}`,
		`{}`, `[]`, `null`, `{"id":1}`, `{"id":"x","extra":1}`, `{"id":"x"} {}`, "\xff", `{"id":"a","args":"str"}`} {
		f.Add("ping", []byte(s))
		f.Add("set_interval", []byte(s))
		f.Add("set_log_level", []byte(s))
	}
	c := &Commands{log: slog.New(slog.DiscardHandler), timeout: 1e9, h: map[string]CommandHandler{}}
	c.link = &Link{topics: NewTopics("f", "d")}
	tel := NewTelemetry(nil, nil, TelemetryConfig{}, Sources{})
	c.RegisterBuiltins(Builtins{Telemetry: tel, LogLevel: new(slog.LevelVar), Models: func() []ModelVersion { return nil }})
	c.Handle("panic", func(context.Context, json.RawMessage) (any, error) { panic("boom") })
	f.Fuzz(func(t *testing.T, name string, payload []byte) {
		r := c.Run(context.Background(), name, payload)
		if _, err := json.Marshal(r); err != nil {
			t.Fatal(err)
		}
		if r.OK && r.Error != "" || !r.OK && r.Error == "" {
			t.Fatalf("inconsistent response %+v", r)
		}
		if _, err := ParseCommand(payload); err != nil && r.OK {
			t.Fatalf("a payload ParseCommand refuses was run: %+v", r)
		}
	})
}

// FuzzRecord: an outbox record read back from disk never panics the
// decoder, and what decodes survives a round trip.
func FuzzRecord(f *testing.F) {
	r := record{class: ClassEvent, retained: false, topic: "edgeinfer/v1/f/d/events", payload: []byte(`{"seq":1}`)}
	f.Add(r.encode())
	f.Add([]byte{1, 2, 1, 0, 0})
	f.Add([]byte{1, 9, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(1, b)
		if err != nil {
			return
		}
		r2, err := decodeRecord(1, r.encode())
		if err != nil || r2.class != r.class || r2.retained != r.retained || r2.topic != r.topic || string(r2.payload) != string(r.payload) {
			t.Fatalf("round trip of %x: %+v, %v", b, r2, err)
		}
	})
}
