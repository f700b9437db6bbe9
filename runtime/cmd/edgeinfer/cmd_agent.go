//go:build cgo

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/edgeinfer/edgeinfer/update/wire"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/sparkplug"
	"github.com/edgeinfer/edgeinfer/pkg/power"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/rollout"
	"github.com/edgeinfer/edgeinfer/update/serving"
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
  sparkplug ({"group": "plant-7"}: also a Sparkplug B edge node),
  update (keep one model up to date from signed releases):
    {"model": "detector", "image_root": "/etc/edgeinfer/image-root.json",
     "director_root": "/etc/edgeinfer/director-root.json",
     "labels": {"site": "berlin"}, "check_interval": "5m"}
    fields: model, image_root, director_root, metadata_dir, source
    ("" fetches from the fleet over the broker; a directory or an
    http(s):// URL otherwise), source_ca_file, labels, providers,
    check_interval, retry_interval, max_bytes_per_sec

The agent holds the model store for its whole run (the update agent
writes to it); 'edgeinfer update status' reads it once the agent stops,
and the fleet sees the same state on the retained .../update topic.`

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
	// node (the device id is the node id); its NDEATH becomes the will and
	// is published before a clean shutdown's disconnect.
	Sparkplug *struct {
		Group string `json:"group"`
	} `json:"sparkplug"`
	// Update, when set, runs the update agent for one model: releases
	// are fetched (from the fleet over the link unless Source says
	// otherwise), verified, health-checked in the serving engine and
	// swapped in while it serves.
	Update *agentUpdate `json:"update"`
}

// agentUpdate is agent.json's update section.
type agentUpdate struct {
	Model        string `json:"model"`
	ImageRoot    string `json:"image_root"`
	DirectorRoot string `json:"director_root"`
	MetadataDir  string `json:"metadata_dir"`
	// Source is "" (the fleet over the broker), a repository directory or
	// an http(s):// base URL (as for edgeinfer update --source).
	Source         string            `json:"source"`
	SourceCAFile   string            `json:"source_ca_file"`
	Labels         map[string]string `json:"labels"`
	Providers      []string          `json:"providers"`
	CheckInterval  string            `json:"check_interval"`
	RetryInterval  string            `json:"retry_interval"`
	MaxBytesPerSec int64             `json:"max_bytes_per_sec"`
	// KeepVersions is how many versions of the model stay on the device
	// (update.Config.Keep): 0 means the active and the previous one.
	KeepVersions int `json:"keep_versions"`
}

// durations parses the section's intervals ("" means the device's
// defaults).
func (u *agentUpdate) durations() (check, retry time.Duration, err error) {
	for _, d := range []struct {
		name string
		s    string
		v    *time.Duration
	}{{"update.check_interval", u.CheckInterval, &check}, {"update.retry_interval", u.RetryInterval, &retry}} {
		if d.s == "" {
			continue
		}
		if *d.v, err = time.ParseDuration(d.s); err != nil || *d.v <= 0 {
			return 0, 0, fmt.Errorf("%s: %q is not a positive duration like \"5m\"", d.name, d.s)
		}
	}
	return check, retry, nil
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
	if u := c.Update; u != nil {
		if _, _, err := u.durations(); err != nil {
			return c, lc, fmt.Errorf("config %s: %w", path, err)
		}
		ucfg := update.Config{Model: u.Model, ImageRoot: u.ImageRoot, DirectorRoot: u.DirectorRoot, MaxBytesPerSec: u.MaxBytesPerSec, Keep: u.KeepVersions}
		if err := ucfg.Validate(); err != nil {
			return c, lc, fmt.Errorf("config %s: update: %w", path, err)
		}
		if err := (rollout.Config{Labels: u.Labels}).Validate(); err != nil {
			return c, lc, fmt.Errorf("config %s: update: %w", path, err)
		}
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

// agent runs until ctx ends, then shuts down in order: the update device
// stops, telemetry stops, the outbox is flushed (as far as the broker
// allows within flush_timeout), the link publishes offline and closes,
// the engine and the stores close.
func agent(ctx context.Context, stdout io.Writer, cfg agentConfig, lcfg link.Config, level *slog.LevelVar, log *slog.Logger) (err error) {
	// A stop (SIGTERM) cancels ctx wherever the agent is, starting up
	// included: what it cut short is a clean stop, not a failure.
	defer func() {
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil
		}
	}()
	sdk, board := sdkVersion(), cfg.Board
	if board == "" {
		board = detectBoard()
	}
	// The agent holds the model store for the whole run: the update agent
	// writes to it, and a store file has one holder at a time. The engine
	// is given exported directories (engine.StoredBundle), not the store.
	st, err := store.Open(ctx, cfg.Store, store.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("agent: open store: %w", err)
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	names := cfg.Models
	if len(names) > 0 && cfg.Update != nil && !slices.Contains(names, cfg.Update.Model) {
		names = append(slices.Clip(names), cfg.Update.Model)
	}
	versions := func() []link.ModelVersion {
		v, err := storeVersions(ctx, st, names)
		if err != nil {
			log.Warn("agent: store versions", "err", err)
		}
		return v
	}
	specs, err := activeSpecs(ctx, st, cfg.Models, cfg.Update)
	if err != nil {
		return err
	}
	// The engine opens even with nothing to serve yet: the first release
	// an update brings is loaded into it.
	eng, err := engine.Open(ctx, engine.Config{Models: specs, Logger: log})
	if err != nil {
		return fmt.Errorf("agent: open engine: %w", err)
	}
	defer func() { err = errors.Join(err, eng.Close(context.Background())) }()
	if len(specs) == 0 && cfg.Update == nil {
		log.Warn("agent: the store has no active model and no update section; running the link only", "store", cfg.Store)
	}
	obStore, err := store.Open(ctx, cfg.Outbox, store.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("agent: open outbox store: %w", err)
	}
	defer func() { err = errors.Join(err, obStore.Close()) }()

	birth := func() link.Birth { return link.Birth{SDKVersion: sdk, Board: board, Models: versions()} }
	hooks := link.Hooks{Birth: birth}
	var node *sparkplug.Node
	if cfg.Sparkplug != nil {
		// The outbox store keeps the node's bdSeq, so a restarted agent's
		// sessions do not repeat the numbers hosts saw from the last run.
		if node, err = sparkplug.NewNodeWith(sparkplug.Config{Group: cfg.Sparkplug.Group, Node: lcfg.Device},
			sparkplug.Options{State: obStore, Logger: log}); err != nil {
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
		Models:      versions,
		Power:       link.PowerSensor(probe),
		Temperature: link.TemperatureSensor(probe),
		Clock:       link.SystemClock,
		StoreBytes:  func() (int64, error) { return agentFileBytes(cfg.Store, cfg.Outbox) },
		Engine:      func() link.EngineStats { return serving.EngineStats(eng) },
	}
	tel := link.NewTelemetry(l, ob, link.TelemetryConfig{Interval: interval, Sketches: cfg.TelemetrySketches, SDKVersion: sdk, Board: board}, src)
	if node != nil {
		if err := node.Start(ctx, l); err != nil {
			return fmt.Errorf("agent: sparkplug: %w", err)
		}
		tel.AddSink(node.Publish)
	}
	stopRecords := eng.Observe(serving.Records(tel))
	tel.Start()
	defer func() { stopRecords(); err = errors.Join(err, tel.Close()) }()

	cmds := link.NewCommands(l, 0)
	cmds.RegisterBuiltins(link.Builtins{Telemetry: tel, LogLevel: level, Models: versions})
	if cfg.Update != nil {
		dev, err := startUpdates(ctx, cfg, board, st, eng, l, ob, cmds, log)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, dev.Close()) }()
	}
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
	vs := versions()
	event("agent_started", map[string]any{"models": vs, "sdk_version": sdk})
	defer event("agent_stopping", nil) // flushed with the outbox below
	fmt.Fprintf(stdout, "agent: device %s/%s, %d model(s), broker %s, topics %s#\n", lcfg.Fleet, lcfg.Device, len(vs), lcfg.Broker, l.Topics().Base())
	if u := cfg.Update; u != nil {
		fmt.Fprintf(stdout, "agent: keeping %s up to date (%s); state on %s\n", u.Model, cmp.Or(u.Source, "from the fleet over the broker"), wire.StateTopic(l.Topics()))
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if werr := l.WaitConnected(wctx); werr != nil && ctx.Err() == nil {
		log.Warn("agent: broker not reached yet; retrying in the background", "err", werr)
	}
	cancel()
	<-ctx.Done()
	fmt.Fprintln(stdout, "agent: stopping")
	return nil
}

// startUpdates builds the update agent for the update section's model and
// the device that drives it: checks on (re)connection, on the fleet's
// nudge and every check_interval; events and the retained update state
// go through the outbox; new versions swap into eng while it serves.
func startUpdates(ctx context.Context, cfg agentConfig, board string, st *store.Store, eng *engine.Engine,
	l *link.Link, ob *link.Outbox, cmds *link.Commands, log *slog.Logger) (*rollout.Device, error) {
	u := cfg.Update
	check, retry, _ := u.durations() // validated with the config
	var src update.Source = update.MQTTSource{R: rollout.Requester{L: l}}
	if u.Source != "" {
		var err error
		if src, err = updateSource(u.Source, u.SourceCAFile); err != nil {
			return nil, fmt.Errorf("agent: update.source: %w", err)
		}
	}
	// A kill during an earlier update is resolved first: the journal says
	// where it stood, and the last good version is what serves.
	sink := rollout.Events()
	ag, err := update.New(update.Config{Model: u.Model, ImageRoot: u.ImageRoot, DirectorRoot: u.DirectorRoot, MetadataDir: u.MetadataDir,
		MaxBytesPerSec: u.MaxBytesPerSec, Keep: u.KeepVersions, Device: update.Device{ID: cfg.Device, Board: board, Providers: u.Providers}},
		update.Deps{Store: st, Source: src, Activator: serving.EngineActivator{Engine: eng, Store: st}, Events: sink, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("agent: update: %w", err)
	}
	dev, err := rollout.New(rollout.Config{Board: board, Labels: u.Labels, CheckInterval: check, RetryInterval: retry},
		rollout.Deps{Link: l, Outbox: ob, Agent: ag, Commands: cmds, Logger: log}, u.Model, sink)
	if err != nil {
		return nil, fmt.Errorf("agent: update: %w", err)
	}
	return dev, nil
}

// storeVersions lists the store's models (all, or those named) with their
// active and previous versions.
func storeVersions(ctx context.Context, st *store.Store, names []string) ([]link.ModelVersion, error) {
	byName := map[string]*link.ModelVersion{}
	var order []string
	for e, err := range st.List(ctx) {
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
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
	for _, n := range order {
		if mv := byName[n]; mv != nil && mv.Active != "" {
			versions = append(versions, *mv)
		}
	}
	return versions, nil
}

// activeSpecs is what the engine opens with: every named model's active
// version (all active models when none is named), exported from the held
// store. A named model without an active version is an error, except the
// update section's model, whose first version may still be on its way.
func activeSpecs(ctx context.Context, st *store.Store, names []string, u *agentUpdate) ([]engine.ModelSpec, error) {
	vs, err := storeVersions(ctx, st, names)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, v := range vs {
		have[v.Name] = true
	}
	for _, n := range names {
		if !have[n] && (u == nil || n != u.Model) {
			return nil, fmt.Errorf("agent: models: %q has no active version in %s (edgeinfer models activate)", n, st.Path())
		}
	}
	var specs []engine.ModelSpec
	for _, v := range vs {
		b, err := engine.StoredBundle(ctx, st, v.Name)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		specs = append(specs, engine.ModelSpec{Name: v.Name, Dir: b.Dir})
	}
	return specs, nil
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
