// Package rollout is the device's side of fleet rollouts: it wires the
// MQTT link (pkg/link), the update agent (update) and the engine's
// run-time swap (an update.Activator: runtime/device's EngineActivator)
// together, so a device keeps one model up to date from what the fleet's
// director assigns it and tells the fleet where it stands.
//
// A Device
//
//   - fetches releases over the link's request/response topics
//     (Requester: req/tuf-meta/<id>, req/tuf-chunk/<id>, answered by
//     `edgeinfer fleet serve` or anything speaking update.ServeRequest);
//   - checks for an update when it (re)connects, every CheckInterval, and
//     when the fleet sends the command update {"action":"check"};
//   - rolls back on update {"action":"rollback","version":V} when it runs
//     V (without a version: whatever runs), and checks instead when not;
//   - publishes its update state, retained, on
//     edgeinfer/v1/<fleet>/<device>/update (wire.State) through the durable
//     outbox, and every update event on .../events.
//
// The retained state is what the fleet side rebuilds its view from: no
// fleet instance holds anything a device has not published.
package rollout

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/wire"
)

// Requester carries update.MQTTSource's requests over a link.
type Requester struct {
	L *link.Link
	// Timeout bounds one request; 0 means 15 s. A request whose answer
	// never comes (the fleet instance that took it died) fails, and the
	// agent resumes the download later, fetching only what is missing.
	Timeout time.Duration
}

// Request implements update.Requester.
func (r Requester) Request(ctx context.Context, topic string, payload []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.Timeout, 15*time.Second))
	defer cancel()
	return r.L.Request(ctx, wire.RequestName(topic), payload)
}

// Config configures a Device. It is plain data; zero values are documented.
type Config struct {
	// Board is the board's name (as in the link's birth); Labels are the
	// device's placement (site, line, ...) that rollouts select on.
	Board  string            `json:"board,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// CheckInterval is how often the device checks on its own; 0 means 5
	// minutes. The fleet nudges assigned devices with the update command,
	// so this only bounds how late a missed nudge is noticed.
	CheckInterval time.Duration `json:"check_interval,omitempty"`
	// RetryInterval is the wait after a check that failed on transport
	// (broker away, no fleet server answering); 0 means 5 s.
	RetryInterval time.Duration `json:"retry_interval,omitempty"`
}

// Validate reports a bad field by name.
func (c Config) Validate() error {
	switch {
	case c.CheckInterval < 0:
		return fmt.Errorf("%w: check_interval %v is negative", ErrConfig, c.CheckInterval)
	case c.RetryInterval < 0:
		return fmt.Errorf("%w: retry_interval %v is negative", ErrConfig, c.RetryInterval)
	}
	for k := range c.Labels {
		if k == "" || strings.ContainsAny(k, "=,") {
			return fmt.Errorf("%w: label name %q (no '=', ',' or empty names)", ErrConfig, k)
		}
	}
	return nil
}

// Deps are a Device's collaborators; all are required but Commands and
// Logger.
type Deps struct {
	Link   *link.Link
	Outbox *link.Outbox
	// Commands, when given, gets the update command registered (before
	// its Start); nil registers nothing.
	Commands *link.Commands
	Logger   *slog.Logger
}

// Device runs the device's side of rollouts. It is safe for concurrent
// use; Close is idempotent.
type Device struct {
	cfg   Config
	l     *link.Link
	ob    *link.Outbox
	ag    *update.Agent
	model string
	log   *slog.Logger
	kick  chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu struct {
		sync.Mutex
		lastEvent, refused, refusedVersion string
		checked                            time.Time
	}
}

// New builds the update agent for ucfg and udeps and starts the device's
// side of rollouts around it. The agent's events are the device's (every
// step goes to the outbox and refreshes the retained state).
func New(cfg Config, d Deps, ucfg update.Config, udeps update.Deps) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Link == nil || d.Outbox == nil {
		return nil, fmt.Errorf("%w: a device needs a link and an outbox", ErrConfig)
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = 5 * time.Minute
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = 5 * time.Second
	}
	dev := &Device{cfg: cfg, l: d.Link, ob: d.Outbox, model: ucfg.Model, log: d.Logger, kick: make(chan struct{}, 1)}
	if dev.log == nil {
		dev.log = slog.New(slog.DiscardHandler)
	}
	if udeps.Events != nil {
		return nil, fmt.Errorf("%w: the device is its agent's event sink: leave update.Deps.Events nil", ErrConfig)
	}
	udeps.Events = update.EventFunc(dev.emit)
	ag, err := update.New(ucfg, udeps)
	if err != nil {
		return nil, err
	}
	dev.ag = ag
	dev.ctx, dev.cancel = context.WithCancel(context.Background())
	if d.Commands != nil {
		d.Commands.Handle(wire.CommandUpdate, dev.command)
	}
	dev.wg.Add(1)
	go dev.loop()
	return dev, nil
}

// Agent is the update agent the device drives.
func (d *Device) Agent() *update.Agent { return d.ag }

// Check asks for an update check soon (it does not wait for it).
func (d *Device) Check() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Close stops the device's loop and waits for it. It does not close the
// link, outbox or agent: their owner does.
func (d *Device) Close() error {
	d.once.Do(func() {
		d.cancel()
		d.wg.Wait()
	})
	return nil
}

// loop checks on (re)connection, on a kick and every CheckInterval, and
// republishes the state after each (re)connection.
func (d *Device) loop() {
	defer d.wg.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var connects uint64
	var next time.Time // next check; zero: as soon as connected
	published := false
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-d.kick:
			next = time.Time{}
		case <-tick.C:
		}
		st := d.l.Stats()
		if !st.Connected {
			continue
		}
		if st.Connects != connects {
			connects, next, published = st.Connects, time.Time{}, false
		}
		if !published {
			published = d.publishState(d.ctx) == nil
		}
		if time.Now().Before(next) {
			continue
		}
		next = time.Now().Add(d.cfg.CheckInterval)
		if err := d.update(d.ctx); err != nil && d.ctx.Err() == nil {
			if errors.Is(err, update.ErrSource) {
				next = time.Now().Add(d.cfg.RetryInterval)
			}
			d.log.Info("device: update check", "err", err)
		}
		d.mu.Lock()
		d.mu.checked = time.Now()
		d.mu.Unlock()
		published = d.publishState(d.ctx) == nil
	}
}

// update resumes an interrupted update or applies the assigned one.
func (d *Device) update(ctx context.Context) error {
	if _, err := d.ag.Resume(ctx); err != nil && !errors.Is(err, update.ErrNoUpdate) {
		return err
	}
	_, err := d.ag.Apply(ctx)
	if errors.Is(err, update.ErrNoUpdate) {
		return nil
	}
	return err
}

func (d *Device) command(ctx context.Context, raw json.RawMessage) (any, error) {
	var a wire.Command
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, fmt.Errorf("device: update args: %v (want {\"action\":\"check\"|\"rollback\"|\"state\"})", err)
		}
	}
	switch a.Action {
	case "", "check":
		d.Check()
		return map[string]string{"scheduled": "check"}, nil
	case "rollback":
		ref, err := d.ag.RollbackFrom(ctx, a.Version)
		if errors.Is(err, update.ErrNotActive) {
			// Never took the release (or already left it, the director's
			// own reassignment included): going back from what it runs
			// would undo an older one. The check follows the director,
			// which no longer assigns it.
			d.Check()
			return map[string]string{"skipped": fmt.Sprintf("%v: nothing to roll back; checking instead", err)}, nil
		}
		if err != nil {
			return nil, err
		}
		perr := d.publishState(ctx)
		return map[string]string{"active": ref.String()}, perr
	case "state":
		return d.State(ctx)
	}
	return nil, fmt.Errorf("device: unknown update action %q (want check, rollback or state)", a.Action)
}

// State reads the device's current update state.
func (d *Device) State(ctx context.Context) (wire.State, error) {
	s, err := d.ag.Status(ctx)
	if err != nil {
		return wire.State{}, err
	}
	d.mu.Lock()
	last, refused, refusedVersion, checked := d.mu.lastEvent, d.mu.refused, d.mu.refusedVersion, d.mu.checked
	d.mu.Unlock()
	var checkedAt string
	if !checked.IsZero() {
		checkedAt = checked.UTC().Format(time.RFC3339Nano)
	}
	return wire.State{Schema: wire.StateSchema, Fleet: fleetOf(d.l), Device: deviceOf(d.l), Board: d.cfg.Board, Labels: d.cfg.Labels,
		Model: d.model, Active: s.Active, Previous: s.Previous, Installed: s.Installed,
		Phase: s.Journal.Phase, Version: s.Journal.Version, Counter: s.Journal.Counter, Reason: s.Journal.Reason,
		LastEvent: last, Refused: refused, RefusedVersion: refusedVersion, Checked: checkedAt, Time: time.Now().UTC().Format(time.RFC3339Nano)}, nil
}

// publishState queues the retained state in the outbox (ClassStatus:
// retained, never dropped).
func (d *Device) publishState(ctx context.Context) error {
	s, err := d.State(ctx)
	if err != nil {
		return err
	}
	_, err = d.ob.Enqueue(ctx, wire.StateTopic(d.l.Topics()), link.ClassStatus, func(seq uint64) []byte {
		s.Seq = seq
		b, _ := json.Marshal(s)
		return b
	})
	return err
}

func (d *Device) emit(ctx context.Context, e update.Event) error {
	d.mu.Lock()
	d.mu.lastEvent = string(e.Kind)
	if e.Kind == update.EventRefused {
		d.mu.refused, d.mu.refusedVersion = e.Reason, e.Version
	}
	d.mu.Unlock()
	_, err := d.ob.Enqueue(ctx, d.l.Topics().Events(), link.ClassEvent, func(seq uint64) []byte {
		b, _ := json.Marshal(wire.Event{Schema: wire.EventSchema, Seq: seq, Device: deviceOf(d.l), Event: e})
		return b
	})
	// Steps the fleet decides on also refresh the retained state.
	switch e.Kind {
	case update.EventDownloading, update.EventVerified:
	default:
		err = errors.Join(err, d.publishState(ctx))
	}
	return err
}

// fleetOf and deviceOf read the names back from the link's topic base
// (edgeinfer/v1/<fleet>/<device>/).
func fleetOf(l *link.Link) string  { return namePart(l, 0) }
func deviceOf(l *link.Link) string { return namePart(l, 1) }

func namePart(l *link.Link, i int) string {
	rest := strings.TrimPrefix(l.Topics().Base(), link.Root+"/")
	parts := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	if i < len(parts) {
		return parts[i]
	}
	return ""
}
