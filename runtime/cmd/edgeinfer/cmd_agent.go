//go:build cgo

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/edgeinfer/edgeinfer/runtime/device"
)

func init() {
	register(&command{
		name:    "agent",
		summary: "run the whole device: engine with the store's active models, local HTTP API, MQTT link, telemetry, commands, updates",
		run:     runAgent,
	})
}

const agentUsage = `usage: edgeinfer agent --config agent.json

Runs the whole device (runtime/device) until SIGTERM or SIGINT: opens the
model store and the engine with its active models, connects to the broker
(edgeinfer/v1/<fleet>/<device>/...), publishes a retained online status,
telemetry every interval through the durable outbox, answers commands,
keeps the update section's model up to date, and serves the local HTTP
API when the file has an http section. On SIGTERM the API drains, the
agent publishes the offline status, flushes the outbox as far as the
broker allows and closes everything.

agent.json (plain JSON; unknown fields are refused):
  {"store": "/var/lib/edgeinfer/models.db", "broker": "tcp://127.0.0.1:1883",
   "fleet": "plant-7", "device": "cam-12", "telemetry_interval": "10s",
   "http": {"addr": "127.0.0.1:8080", "token": "s3cret"}}
fields: store, models, outbox, broker, fleet, device, client_id, username,
  password, ca_file, cert_file, key_file, server_name, keep_alive,
  backoff_min, backoff_max, telemetry_interval,
  telemetry_sketches, outbox_max_bytes, flush_timeout, log_level, board,
  engine ({"session": {"intra_op_threads": 2}, "kv": {...}, "scheduler": {...}}),
  http (the OpenAI-compatible API: addr, token, tls_cert_file,
    tls_key_file, max_body_bytes, max_infer_body_bytes, max_prompt_tokens,
    read_header_timeout, idle_timeout, drain_timeout),
  sparkplug ({"group": "plant-7"}: also a Sparkplug B edge node),
  update (keep one model up to date from signed releases):
    {"model": "detector", "image_root": "/etc/edgeinfer/image-root.json",
     "director_root": "/etc/edgeinfer/director-root.json",
     "labels": {"site": "berlin"}, "check_interval": "5m"}
    fields: model, image_root, director_root, metadata_dir, source
    ("" fetches from the fleet over the broker; a directory or an
    http(s):// URL otherwise), source_ca_file, labels, providers,
    check_interval, retry_interval, request_timeout, max_bytes_per_sec,
    keep_versions

The agent holds the model store for its whole run (the update agent
writes to it); 'edgeinfer update status' reads it once the agent stops,
and the fleet sees the same state on the retained .../update topic.`

func runAgent(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("agent")
	cfgPath := fs.String("config", "agent.json", "agent configuration `file` (JSON)")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), agentUsage); fs.PrintDefaults() }
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadAgentConfig(*cfgPath)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return agent(ctx, stdout, cfg)
}

// loadAgentConfig reads agent.json: the device's Config in its JSON form.
func loadAgentConfig(path string) (device.Config, error) {
	cfg, err := device.LoadConfig(path)
	if err == nil && cfg.Broker == "" {
		err = fmt.Errorf("config %s: broker: required (an agent is on the fleet's broker; 'edgeinfer serve' runs without one)", path)
	}
	return cfg, err
}

// agent runs the device until ctx ends. A stop (SIGTERM) cancels ctx
// wherever the device is, starting up included: what it cut short is a
// clean stop, not a failure.
func agent(ctx context.Context, stdout io.Writer, cfg device.Config) (err error) {
	defer func() {
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil
		}
	}()
	d, err := device.Open(ctx, cfg)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	s := d.State(ctx)
	fmt.Fprintf(stdout, "agent: device %s/%s, %d model(s), broker %s, topics %s#\n", cfg.Fleet, cfg.Device, len(s.Stored), s.Broker, s.Topics)
	if u := cfg.Update; u != nil {
		fmt.Fprintf(stdout, "agent: keeping %s up to date (%s); state on %supdate\n", u.Model, cmp.Or(u.Source, "from the fleet over the broker"), s.Topics)
	}
	if s.HTTP != "" {
		fmt.Fprintf(stdout, "agent: serving the HTTP API on %s://%s (POST /v1/chat/completions, /v1/completions; GET /v1/models, /metrics)\n", scheme(cfg.HTTP), s.HTTP)
	}
	err = d.Run(ctx)
	fmt.Fprintln(stdout, "agent: stopping")
	return err
}

// scheme is the HTTP API's URL scheme.
func scheme(h *device.HTTP) string {
	if h != nil && h.TLSCertFile != "" {
		return "https"
	}
	return "http"
}
