package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/power"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/update/link"
	"github.com/edgeinfer/edgeinfer/update/link/sparkplug"
)

func init() {
	register(&command{
		name:    "agent",
		summary: "run the device agent: engine with the store's active models, MQTT link, telemetry, commands",
		run:     runAgent,
	})
}

const agentUsage = `usage: edgeinfer agent --config agent.json

Runs until SIGTERM or SIGINT: opens the model store and the engine with its
active models, connects to the broker (edgeinfer/v1/<fleet>/<device>/...),
publishes a retained online status, telemetry every interval through the
durable outbox, and answers commands. On SIGTERM it publishes the offline
status, flushes the outbox as far as the broker allows and closes everything.

agent.json (plain JSON; unknown fields are refused):
  {"store": "/var/lib/edgeinfer/models.db", "broker": "tcp://127.0.0.1:1883",
   "fleet": "plant-7", "device": "cam-12", "telemetry_interval": "10s"}
fields: store, outbox, models, broker, fleet, device, client_id, username,
  password, ca_file, cert_file, key_file, server_name, telemetry_interval,
  telemetry_sketches,
  outbox_max_bytes, flush_timeout, log_level, board,
  sparkplug ({"group": "plant-7"}: also a Sparkplug B edge node)`

// agentConfig is agent.json: plain data, every field optional but store,
// broker, fleet and device.
type agentConfig struct {
	// Store is the model store file (pkg/store).
	Store string `json:"store"`
	// Outbox is the outbox's store file; "" means "<store>.outbox". It is
	// a file of its own because the engine opens and closes the model
	// store itself, and a store file has one owner at a time.
	Outbox string `json:"outbox"`
	// Models names the store's models to serve (their active versions);
	// empty means every model with an active version.
	Models []string `json:"models"`
	// Broker, Fleet, Device, ... are link.Config's fields.
	Broker     string `json:"broker"`
	Fleet      string `json:"fleet"`
	Device     string `json:"device"`
	ClientID   string `json:"client_id"`
	Username   string `json:"username"`
	Password   string `json:"password"`
	CAFile     string `json:"ca_file"`
	CertFile   string `json:"cert_file"`
	KeyFile    string `json:"key_file"`
	ServerName string `json:"server_name"`
	// TelemetryInterval is a Go duration ("10s"); "" means 10 s.
	TelemetryInterval string `json:"telemetry_interval"`
	// TelemetrySketches adds each distribution's histogram to telemetry,
	// for fleet-wide quantiles.
	TelemetrySketches bool `json:"telemetry_sketches"`
	// OutboxMaxBytes bounds the outbox; 0 means 64 MiB.
	OutboxMaxBytes int64 `json:"outbox_max_bytes"`
	// FlushTimeout bounds the outbox flush at shutdown; "" means 5 s.
	FlushTimeout string `json:"flush_timeout"`
	// LogLevel is debug, info, warn or error; "" means info. The
	// set_log_level command changes it at run time.
	LogLevel string `json:"log_level"`
	// Board overrides the detected board name in status and telemetry.
	Board string `json:"board"`
	// Sparkplug, when set, also publishes telemetry as a Sparkplug B edge
	// node (the device id is the node id); its NDEATH becomes the will.
	Sparkplug *struct {
		Group string `json:"group"`
	} `json:"sparkplug"`
}

// loadAgentConfig reads and validates agent.json; errors name the field.
func loadAgentConfig(path string) (agentConfig, link.Config, error) {
	var c agentConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return c, link.Config{}, fmt.Errorf("config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, link.Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	if c.Store == "" {
		return c, link.Config{}, fmt.Errorf("config %s: store: required (the model store file)", path)
	}
	if c.Outbox == "" {
		c.Outbox = c.Store + ".outbox"
	}
	for _, d := range []struct {
		name string
		v    *string
		def  string
	}{{"telemetry_interval", &c.TelemetryInterval, "10s"}, {"flush_timeout", &c.FlushTimeout, "5s"}} {
		if *d.v == "" {
			*d.v = d.def
		}
		if v, err := time.ParseDuration(*d.v); err != nil || v <= 0 {
			return c, link.Config{}, fmt.Errorf("config %s: %s: %q is not a positive duration like \"10s\"", path, d.name, *d.v)
		}
	}
	if iv, _ := time.ParseDuration(c.TelemetryInterval); iv < 100*time.Millisecond {
		return c, link.Config{}, fmt.Errorf("config %s: telemetry_interval: %v is below 100ms", path, iv)
	}
	if c.OutboxMaxBytes < 0 {
		return c, link.Config{}, fmt.Errorf("config %s: outbox_max_bytes: negative", path)
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return c, link.Config{}, fmt.Errorf("config %s: log_level: %q (want debug, info, warn or error)", path, c.LogLevel)
	}
	lc := link.Config{Broker: c.Broker, Fleet: c.Fleet, Device: c.Device, ClientID: c.ClientID, Username: c.Username,
		Password: c.Password, CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, ServerName: c.ServerName}
	if err := lc.Validate(); err != nil {
		return c, lc, fmt.Errorf("config %s: %w", path, err)
	}
	if c.Sparkplug != nil {
		if err := (sparkplug.Config{Group: c.Sparkplug.Group, Node: c.Device}).Validate(); err != nil {
			return c, lc, fmt.Errorf("config %s: sparkplug: %w", path, err)
		}
	}
	return c, lc, nil
}

func runAgent(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("agent")
	cfgPath := fs.String("config", "agent.json", "agent configuration `file` (JSON)")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), agentUsage); fs.PrintDefaults() }
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, lcfg, err := loadAgentConfig(*cfgPath)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	level := new(slog.LevelVar)
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	lcfg.Logger = log
	return agent(ctx, stdout, cfg, lcfg, level, log)
}

// agent runs until ctx ends, then shuts down in order: telemetry stops,
// the outbox is flushed (as far as the broker allows within
// flush_timeout), the link publishes offline and closes, the engine and
// the stores close.
func agent(ctx context.Context, stdout io.Writer, cfg agentConfig, lcfg link.Config, level *slog.LevelVar, log *slog.Logger) (err error) {
	sdk, board := sdkVersion(), cfg.Board
	if board == "" {
		board = detectBoard()
	}
	versions, specs, err := storeModels(ctx, cfg.Store, cfg.Models)
	if err != nil {
		return err
	}
	var eng *engine.Engine
	if len(specs) > 0 {
		eng, err = engine.Open(ctx, engine.Config{Store: cfg.Store, Models: specs, Logger: log})
		if err != nil {
			return fmt.Errorf("agent: open engine: %w", err)
		}
		defer func() { err = errors.Join(err, eng.Close(context.Background())) }()
	} else {
		log.Warn("agent: the store has no active model; running the link only", "store", cfg.Store)
	}
	obStore, err := store.Open(ctx, cfg.Outbox, store.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("agent: open outbox store: %w", err)
	}
	defer func() { err = errors.Join(err, obStore.Close()) }()

	birth := func() link.Birth { return link.Birth{SDKVersion: sdk, Board: board, Models: versions} }
	hooks := link.Hooks{Birth: birth}
	var node *sparkplug.Node
	if cfg.Sparkplug != nil {
		if node, err = sparkplug.NewNode(sparkplug.Config{Group: cfg.Sparkplug.Group, Node: lcfg.Device}); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		hooks = node.Hooks(birth)
	}
	l, err := link.OpenWith(ctx, lcfg, hooks)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	ob, err := link.OpenOutbox(ctx, obStore, l, link.OutboxConfig{MaxBytes: cfg.OutboxMaxBytes, Logger: log})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	// runs before l.Close (defers unwind in reverse)
	defer func() {
		flush, _ := time.ParseDuration(cfg.FlushTimeout)
		fctx, cancel := context.WithTimeout(context.Background(), flush)
		defer cancel()
		if ferr := ob.Flush(fctx); ferr != nil {
			log.Warn("agent: outbox not empty at shutdown; kept on disk for the next run", "err", ferr)
		}
		err = errors.Join(err, ob.Close())
	}()

	probe := power.Probe(ctx, os.DirFS("/"), power.ProbeOptions{})
	defer func() { err = errors.Join(err, probe.Close()) }()
	interval, _ := time.ParseDuration(cfg.TelemetryInterval)
	src := link.Sources{
		Models:      func() []link.ModelVersion { return versions },
		Power:       link.PowerSensor(probe),
		Temperature: link.TemperatureSensor(probe),
		Clock:       link.SystemClock,
		StoreBytes:  func() (int64, error) { return agentFileBytes(cfg.Store, cfg.Outbox) },
	}
	if eng != nil {
		src.Engine = func() link.EngineStats { return engineStats(eng) }
	}
	tel := link.NewTelemetry(l, ob, link.TelemetryConfig{Interval: interval, Sketches: cfg.TelemetrySketches, SDKVersion: sdk, Board: board}, src)
	if node != nil {
		if err := node.Start(ctx, l); err != nil {
			return fmt.Errorf("agent: sparkplug: %w", err)
		}
		tel.AddSink(node.Publish)
	}
	stopRecords := func() {}
	if eng != nil {
		stopRecords = observeEngine(eng, tel)
	}
	tel.Start()
	defer func() { stopRecords(); err = errors.Join(err, tel.Close()) }()

	cmds := link.NewCommands(l, 0)
	cmds.RegisterBuiltins(link.Builtins{Telemetry: tel, LogLevel: level, Models: func() []link.ModelVersion { return versions }})
	if err := cmds.Start(ctx); err != nil {
		return fmt.Errorf("agent: commands: %w", err)
	}
	event := func(what string, extra map[string]any) {
		_, eerr := ob.Enqueue(context.Background(), l.Topics().Events(), link.ClassEvent, func(seq uint64) []byte {
			e := map[string]any{"schema": "edgeinfer.event/1", "seq": seq, "event": what, "time": time.Now().UTC().Format(time.RFC3339Nano)}
			for k, v := range extra {
				e[k] = v
			}
			b, _ := json.Marshal(e)
			return b
		})
		if eerr != nil {
			log.Warn("agent: event not enqueued", "event", what, "err", eerr)
		}
	}
	event("agent_started", map[string]any{"models": versions, "sdk_version": sdk})
	defer event("agent_stopping", nil) // flushed with the outbox below
	fmt.Fprintf(stdout, "agent: device %s/%s, %d model(s), broker %s, topics %s#\n", lcfg.Fleet, lcfg.Device, len(versions), lcfg.Broker, l.Topics().Base())
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if werr := l.WaitConnected(wctx); werr != nil && ctx.Err() == nil {
		log.Warn("agent: broker not reached yet; retrying in the background", "err", werr)
	}
	cancel()
	<-ctx.Done()
	fmt.Fprintln(stdout, "agent: stopping")
	return nil
}

// storeModels lists the store's active models (all, or those named),
// closing the store again: the engine opens it itself.
func storeModels(ctx context.Context, path string, names []string) ([]link.ModelVersion, []engine.ModelSpec, error) {
	st, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("agent: open store: %w", err)
	}
	defer st.Close()
	byName := map[string]*link.ModelVersion{}
	var order []string
	for e, err := range st.List(ctx) {
		if err != nil {
			return nil, nil, fmt.Errorf("agent: %w", err)
		}
		mv := byName[e.Ref.Name]
		if mv == nil {
			mv = &link.ModelVersion{Name: e.Ref.Name}
			byName[e.Ref.Name] = mv
			order = append(order, e.Ref.Name)
		}
		if e.Active {
			mv.Active = e.Ref.Version
		}
		if e.Previous {
			mv.Previous = e.Ref.Version
		}
	}
	if len(names) > 0 {
		order = names
	}
	var versions []link.ModelVersion
	var specs []engine.ModelSpec
	for _, n := range order {
		mv := byName[n]
		if mv == nil || mv.Active == "" {
			return nil, nil, fmt.Errorf("agent: models: %q has no active version in %s (edgeinfer models activate)", n, path)
		}
		versions = append(versions, *mv)
		specs = append(specs, engine.ModelSpec{Ref: n})
	}
	return versions, specs, nil
}

func agentFileBytes(paths ...string) (int64, error) {
	var n int64
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}

func sdkVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// detectBoard names the machine: the device tree's model on ARM boards,
// the DMI product name on PCs, else OS/arch.
func detectBoard() string {
	for _, p := range []string{"/proc/device-tree/model", "/sys/class/dmi/id/product_name"} {
		if b, err := os.ReadFile(p); err == nil {
			if s := strings.TrimSpace(strings.TrimRight(string(b), "\x00")); s != "" {
				return s
			}
		}
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}
