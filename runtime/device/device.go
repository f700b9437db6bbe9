package device

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/sparkplug"
	"github.com/edgeinfer/edgeinfer/pkg/power"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/platforms"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/serve"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/rollout"
	"github.com/edgeinfer/edgeinfer/update/wire"
)

// Device is the whole device, running. Its parts start in Open, in the
// order each needs the one before, and stop in Close in the reverse
// order. It is safe for concurrent use.
type Device struct {
	cfg   Config
	log   *slog.Logger
	level *slog.LevelVar // nil when the application gave the logger
	board string

	st    *store.Store // nil without a store
	eng   *engine.Engine
	probe *power.Probed

	http struct {
		srv  *serve.Server
		ln   net.Listener
		done chan struct{} // closed when Serve returns
		err  error         // Serve's, read after done
	}

	l    *link.Link // nil without a broker
	ob   *link.Outbox
	tel  *link.Telemetry
	cmds *link.Commands
	roll *rollout.Device // nil without an update section

	closers []func() error // in the order they run
	once    sync.Once
	err     error
}

// Open starts the device: the model store, the engine with the store's
// active models (and Engine.Models), the power sensors, the link with its
// outbox, telemetry, Sparkplug node and commands, the update agent and
// its rollout loop, and last the HTTP API, so that the first request it
// answers finds everything ready. A failure stops what had started.
//
// ctx bounds the start only; the device runs until Close (or Run's ctx).
func Open(ctx context.Context, cfg Config) (_ *Device, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	d := &Device{cfg: cfg, log: cfg.Logger, board: cmp.Or(cfg.Board, platforms.BoardName("/"))}
	if d.log == nil {
		d.level = new(slog.LevelVar)
		_ = d.level.UnmarshalText([]byte(cfg.LogLevel))
		d.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: d.level}))
	}
	defer func() {
		if err != nil { // what had started stops: the store is free again
			err = errors.Join(err, d.stop())
		}
	}()
	if err := d.openEngine(ctx); err != nil {
		return nil, err
	}
	d.probe = power.Probe(ctx, os.DirFS("/"), power.ProbeOptions{})
	d.onClose(d.probe.Close)
	if cfg.Broker != "" {
		if err := d.openLink(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.HTTP != nil {
		if err := d.openHTTP(); err != nil {
			return nil, err
		}
	}
	if d.l != nil {
		d.event("agent_started", map[string]any{"models": d.versions(), "sdk_version": update.SDKVersion})
	}
	return d, nil
}

// onClose adds a step to the shutdown; steps run last-added first.
func (d *Device) onClose(f func() error) { d.closers = append(d.closers, f) }

// openEngine opens the store (the device is its one holder) and the
// engine with every served model's active version, exported from it.
func (d *Device) openEngine(ctx context.Context) error {
	ecfg := d.cfg.Engine
	ecfg.Logger = cmp.Or(ecfg.Logger, d.log)
	if d.cfg.ModelKeepAlive != 0 {
		ecfg.KeepAlive = time.Duration(d.cfg.ModelKeepAlive)
	}
	if d.cfg.Store != "" {
		st, err := store.Open(ctx, d.cfg.Store, store.Options{Logger: d.log})
		if err != nil {
			return fmt.Errorf("device: open store: %w", err)
		}
		d.st = st
		d.onClose(st.Close)
		ecfg.HeldStore = st // a request naming another of its models loads it
		specs, err := d.activeSpecs(ctx)
		if err != nil {
			return err
		}
		ecfg.Models = append(slices.Clip(ecfg.Models), specs...)
		if ecfg.PrefixPersist.Dir == "" {
			// The prefix cache persists beside the store, like the
			// engine's own default for a store it opens.
			ecfg.PrefixPersist.Dir = d.cfg.Store + ".prefix"
		}
	}
	// The engine opens even with nothing to serve yet: the first release
	// an update brings is loaded into it.
	eng, err := engine.Open(ctx, ecfg)
	if err != nil {
		return fmt.Errorf("device: open engine: %w", err)
	}
	d.eng = eng
	d.onClose(func() error {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return eng.Close(cctx)
	})
	if len(ecfg.Models) == 0 && d.cfg.Update == nil {
		d.log.Warn("device: no model to serve and no update section", "store", d.cfg.Store)
	}
	return nil
}

// openLink connects to the broker and starts what rides on the link:
// the outbox, telemetry (and its Sparkplug twin), commands, updates.
func (d *Device) openLink(ctx context.Context) error {
	cfg := d.cfg
	obStore, err := store.Open(ctx, cfg.Outbox, store.Options{Logger: d.log})
	if err != nil {
		return fmt.Errorf("device: open outbox store: %w", err)
	}
	d.onClose(obStore.Close)
	birth := func() link.Birth {
		return link.Birth{SDKVersion: update.SDKVersion, Board: d.board, Models: d.versions()}
	}
	hooks := link.Hooks{Birth: birth}
	var node *sparkplug.Node
	if cfg.Sparkplug != nil {
		// The outbox store keeps the node's bdSeq, so a restarted device's
		// sessions do not repeat the numbers hosts saw from the last run.
		if node, err = sparkplug.NewNodeWith(sparkplug.Config{Group: cfg.Sparkplug.Group, Node: cfg.Device},
			sparkplug.Options{State: obStore, Logger: d.log}); err != nil {
			return fmt.Errorf("device: %w", err)
		}
		hooks = node.Hooks(birth)
	}
	lcfg := cfg.LinkConfig()
	lcfg.Logger = d.log
	if d.l, err = link.OpenWith(ctx, lcfg, hooks); err != nil {
		return fmt.Errorf("device: %w", err)
	}
	d.onClose(d.l.Close)
	if d.ob, err = link.OpenOutbox(ctx, obStore, d.l, link.OutboxConfig{MaxBytes: cfg.OutboxMaxBytes, Logger: d.log}); err != nil {
		return fmt.Errorf("device: %w", err)
	}
	d.onClose(func() error {
		fctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.FlushTimeout))
		defer cancel()
		if ferr := d.ob.Flush(fctx); ferr != nil {
			d.log.Warn("device: outbox not empty at shutdown; kept on disk for the next run", "err", ferr)
		}
		return d.ob.Close()
	})
	src := link.Sources{
		Models:      d.versions,
		Power:       link.PowerSensor(d.probe),
		Temperature: link.TemperatureSensor(d.probe),
		Clock:       link.SystemClock,
		StoreBytes:  d.fileBytes,
		Engine:      func() link.EngineStats { return EngineStats(d.eng) },
	}
	d.tel = link.NewTelemetry(d.l, d.ob, link.TelemetryConfig{Interval: time.Duration(cfg.TelemetryInterval),
		Sketches: cfg.TelemetrySketches, SDKVersion: update.SDKVersion, Board: d.board}, src)
	if node != nil {
		if err := node.Start(ctx, d.l); err != nil {
			return fmt.Errorf("device: sparkplug: %w", err)
		}
		d.tel.AddSink(node.Publish)
	}
	stopRecords := d.eng.Observe(Records(d.tel))
	d.tel.Start()
	d.onClose(func() error { stopRecords(); return d.tel.Close() })

	d.cmds = link.NewCommands(d.l, 0)
	d.cmds.RegisterBuiltins(link.Builtins{Telemetry: d.tel, LogLevel: d.level, Models: d.versions})
	if cfg.Update != nil {
		if err := d.openUpdates(ctx); err != nil {
			return err
		}
	}
	cctx, cancel := context.WithCancel(context.Background())
	if err := d.cmds.Start(cctx); err != nil {
		cancel()
		return fmt.Errorf("device: commands: %w", err)
	}
	d.onClose(func() error { cancel(); return nil })
	return nil
}

// openUpdates starts the update agent for the update section's model and
// the rollout loop that drives it: checks on (re)connection, on the
// fleet's nudge and every check_interval; events and the retained update
// state go through the outbox; new versions swap into the engine while
// it serves. A kill during an earlier update is resolved first: the
// journal says where it stood, and the last good version is what serves.
func (d *Device) openUpdates(ctx context.Context) error {
	u := d.cfg.Update
	var src update.Source
	if u.Source != "" {
		var err error
		if src, err = update.OpenSource(u.Source, u.SourceCAFile); err != nil {
			return fmt.Errorf("device: update.source: %w", err)
		}
	} else {
		// The fleet's static host when it announces one, the broker's
		// request topics when not (or when the host fails).
		client, err := update.HTTPClient(u.SourceCAFile)
		if err != nil {
			return fmt.Errorf("device: update.source_ca_file: %w", err)
		}
		bulk := rollout.NewBulkSource(update.MQTTSource{R: rollout.Requester{L: d.l, Timeout: time.Duration(u.RequestTimeout)}}, client, d.log)
		if err := bulk.Watch(ctx, d.l, d.cfg.Fleet); err != nil {
			return fmt.Errorf("device: update: %w", err)
		}
		src = bulk
	}
	roll, err := rollout.New(
		rollout.Config{Board: d.board, Labels: u.Labels, CheckInterval: time.Duration(u.CheckInterval), RetryInterval: time.Duration(u.RetryInterval)},
		rollout.Deps{Link: d.l, Outbox: d.ob, Commands: d.cmds, Logger: d.log},
		update.Config{Model: u.Model, ImageRoot: u.ImageRoot, DirectorRoot: u.DirectorRoot, MetadataDir: u.MetadataDir,
			MaxBytesPerSec: u.MaxBytesPerSec, Keep: u.KeepVersions, Device: update.Device{ID: d.cfg.Device, Board: d.board, Providers: u.Providers}},
		update.Deps{Store: d.st, Source: src, Activator: EngineActivator{Engine: d.eng, Store: d.st}, Now: d.cfg.Now, Logger: d.log})
	if err != nil {
		return fmt.Errorf("device: update: %w", err)
	}
	d.roll = roll
	d.onClose(roll.Close)
	return nil
}

// Engine is the device's engine: an application generates and infers on
// it in-process, beside the HTTP API.
func (d *Device) Engine() *engine.Engine { return d.eng }

// Updates is the update agent of the update section (nil without one): its
// status, the bytes it fetched, a rollback by hand.
func (d *Device) Updates() *update.Agent {
	if d.roll == nil {
		return nil
	}
	return d.roll.Agent()
}

// Run blocks until ctx ends, then closes the device. A stop is a clean
// end: the error is Close's.
func (d *Device) Run(ctx context.Context) error {
	if d.l != nil {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if werr := d.l.WaitConnected(wctx); werr != nil && ctx.Err() == nil {
			d.log.Warn("device: broker not reached yet; retrying in the background", "err", werr)
		}
		cancel()
	}
	select {
	case <-ctx.Done():
	case <-d.httpDone():
		// The HTTP API stopped on its own (its listener failed): the
		// device is not what it was configured to be.
		return errors.Join(fmt.Errorf("device: http stopped: %w", d.http.err), d.Close())
	}
	return d.Close()
}

// Close stops the device in order: the HTTP API drains (running streams
// finish within its drain timeout), updates stop, telemetry stops, the
// outbox is flushed as far as the broker allows within flush_timeout,
// the link publishes offline and closes, the engine and the stores
// close. It is idempotent.
func (d *Device) Close() error {
	d.once.Do(func() {
		if d.l != nil {
			d.event("agent_stopping", nil) // flushed with the outbox
		}
		d.err = d.stop()
	})
	return d.err
}

// stop runs the shutdown steps, last added first.
func (d *Device) stop() error {
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		errs = append(errs, d.closers[i]())
	}
	d.closers = nil
	return errors.Join(errs...)
}

// State is what the device is doing, for an operator or a health page.
type State struct {
	Board string `json:"board"`
	SDK   string `json:"sdk_version"`
	// Models are the engine's models now serving.
	Models []engine.ModelInfo `json:"models"`
	// Stored are the store's served models with their active and previous
	// versions (empty without a store).
	Stored []link.ModelVersion `json:"stored,omitempty"`
	// HTTP is the API's address ("" without one).
	HTTP string `json:"http,omitempty"`
	// Broker and Topics name the link ("" without one); Connected says
	// whether it is connected now.
	Broker    string `json:"broker,omitempty"`
	Topics    string `json:"topics,omitempty"`
	Connected bool   `json:"connected"`
	// Update is the update state as the fleet sees it (nil without an
	// update section).
	Update *wire.State `json:"update,omitempty"`
}

// State reports the device's state now.
func (d *Device) State(ctx context.Context) State {
	s := State{Board: d.board, SDK: update.SDKVersion, Models: d.eng.Models(), Stored: d.versions()}
	if d.http.ln != nil {
		s.HTTP = d.http.ln.Addr().String()
	}
	if d.l != nil {
		s.Broker, s.Topics, s.Connected = d.cfg.Broker, d.l.Topics().Base(), d.l.Stats().Connected
	}
	if d.roll != nil {
		if u, err := d.roll.State(ctx); err == nil {
			s.Update = &u
		} else {
			d.log.Warn("device: update state", "err", err)
		}
	}
	return s
}

// event queues an event on the link's events topic.
func (d *Device) event(what string, extra map[string]any) {
	_, err := d.ob.Enqueue(context.Background(), d.l.Topics().Events(), link.ClassEvent, func(seq uint64) []byte {
		e := map[string]any{"schema": "edgeinfer.event/1", "seq": seq, "event": what, "time": time.Now().UTC().Format(time.RFC3339Nano)}
		for k, v := range extra {
			e[k] = v
		}
		b, _ := json.Marshal(e)
		return b
	})
	if err != nil {
		d.log.Warn("device: event not enqueued", "event", what, "err", err)
	}
}

// served is the store's models the device serves: those Config.Models
// names (and the update section's), or all.
func (d *Device) served() []string {
	names := d.cfg.Models
	if len(names) > 0 && d.cfg.Update != nil && !slices.Contains(names, d.cfg.Update.Model) {
		names = append(slices.Clip(names), d.cfg.Update.Model)
	}
	return names
}

// versions lists the served models with their active and previous
// versions; a store that cannot be read is logged, not fatal (telemetry
// and births go on without the list).
func (d *Device) versions() []link.ModelVersion {
	if d.st == nil {
		return nil
	}
	v, err := storeVersions(context.Background(), d.st, d.served())
	if err != nil {
		d.log.Warn("device: store versions", "err", err)
	}
	return v
}

// storeVersions lists the store's models (all, or those named) with their
// active and previous versions.
func storeVersions(ctx context.Context, st *store.Store, names []string) ([]link.ModelVersion, error) {
	byName := map[string]*link.ModelVersion{}
	var order []string
	for e, err := range st.List(ctx) {
		if err != nil {
			return nil, fmt.Errorf("device: %w", err)
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

// activeSpecs is what the engine opens with from the store: every served
// model's active version (or the version a NAME@VERSION entry pins),
// exported. A named model without an active
// version is an error, except the update section's model, whose first
// version may still be on its way.
func (d *Device) activeSpecs(ctx context.Context) ([]engine.ModelSpec, error) {
	vs, err := storeVersions(ctx, d.st, d.served())
	if err != nil {
		return nil, err
	}
	refs := map[string]string{} // name -> what to export: the active version, or the one named
	for _, v := range vs {
		refs[v.Name] = v.Name
	}
	for _, n := range d.cfg.Models {
		if name, _, pinned := strings.Cut(n, "@"); pinned {
			refs[name] = n
			continue
		}
		if refs[n] == "" && (d.cfg.Update == nil || n != d.cfg.Update.Model) {
			return nil, fmt.Errorf("%w: models: %q has no active version in %s (edgeinfer models activate)", ErrConfig, n, d.st.Path())
		}
	}
	var specs []engine.ModelSpec
	for _, name := range slices.Sorted(maps.Keys(refs)) {
		b, err := engine.StoredBundle(ctx, d.st, refs[name])
		if err != nil {
			return nil, fmt.Errorf("device: models: %w", err)
		}
		specs = append(specs, engine.ModelSpec{Name: name, Dir: b.Dir})
	}
	return specs, nil
}

// fileBytes is the store's and the outbox's size on disk, for telemetry.
func (d *Device) fileBytes() (int64, error) {
	var n int64
	for _, p := range []string{d.cfg.Store, d.cfg.Outbox} {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}
