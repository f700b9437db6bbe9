package update

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/clock"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// SDKVersion is this build's SDK version, the default Device.SDKVersion
// that releases' SDK ranges are checked against.
const SDKVersion = "0.1.0"

// Config configures an Agent. It is plain data; zero values are documented.
type Config struct {
	// Model is the name of the model this agent keeps up to date.
	Model string `json:"model"`
	// Device is what the release must be compatible with. An empty
	// SDKVersion means this build's SDKVersion.
	Device Device `json:"device"`
	// ImageRoot is the path of the image repository's root.json pinned at
	// provisioning (trusted until a rotation signed by it replaces it).
	ImageRoot string `json:"image_root"`
	// DirectorRoot is the director repository's pinned root.json; "" means
	// no director: the device installs the newest compatible release the
	// image repository signs.
	DirectorRoot string `json:"director_root,omitempty"`
	// MetadataDir keeps the trusted TUF metadata; "" means the store's
	// path + ".tuf".
	MetadataDir string `json:"metadata_dir,omitempty"`
	// MaxBytesPerSec caps the chunk download rate (metered links); 0: no cap.
	MaxBytesPerSec int64 `json:"max_bytes_per_sec,omitempty"`
	// Keep is how many versions of the model the device keeps, the active
	// and the previous one (the rollback target) included; 0 means
	// DefaultKeep (2). Older versions are removed, with their chunks and
	// exported copies, once an update settles.
	Keep int `json:"keep_versions,omitempty"`
}

// Validate reports what is missing.
func (c Config) Validate() error {
	switch {
	case c.Model == "":
		return fmt.Errorf("%w: no model name", ErrConfig)
	case c.ImageRoot == "":
		return fmt.Errorf("%w: no pinned image root (the root.json provisioned on the device)", ErrConfig)
	case c.MaxBytesPerSec < 0:
		return fmt.Errorf("%w: max_bytes_per_sec %d is negative", ErrConfig, c.MaxBytesPerSec)
	case c.Keep != 0 && c.Keep < 2:
		return fmt.Errorf("%w: keep_versions %d: the active and the previous version (the rollback target) are always kept, so at least 2", ErrConfig, c.Keep)
	}
	if _, err := store.ParseRef(c.Model); err != nil {
		return fmt.Errorf("%w: model %q: %v", ErrConfig, c.Model, err)
	}
	return nil
}

// Deps are the agent's collaborators.
type Deps struct {
	Store  *store.Store
	Source Source
	// Activator switches the engine; nil means none runs in this process
	// (the store's active pointer is switched after the health check, and
	// the serving process picks it up when it next opens the model).
	Activator Activator
	// Events receives every step; nil drops them.
	Events Events
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// Disk tells the free space an update is checked against before it
	// downloads; nil means StatfsDisk.
	Disk Disk
}

// Agent keeps one model up to date from signed releases. It is safe for
// concurrent use; updates run one at a time.
type Agent struct {
	cfg          Config
	st           *store.Store
	src          Source
	act          Activator
	ev           Events
	now          func() time.Time
	sleep        func(context.Context, time.Duration) error
	log          *slog.Logger
	disk         Disk
	imageRoot    []byte
	directorRoot []byte

	mu      sync.Mutex // one update at a time
	bytesIn atomic.Int64
	// partial is the chunk whose pieces were coming when a transfer
	// failed (a broker away, a server that died): the next transfer goes
	// on from its end instead of asking for the pieces again. One chunk,
	// in memory, under mu; the digest is checked on the whole as always.
	partial struct {
		digest store.Digest
		data   []byte
	}
}

// New makes an agent; it reads the pinned roots.
func New(cfg Config, d Deps) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Store == nil || d.Source == nil {
		return nil, fmt.Errorf("%w: an agent needs a store and a source", ErrConfig)
	}
	if cfg.Device.SDKVersion == "" {
		cfg.Device.SDKVersion = SDKVersion
	}
	if cfg.MetadataDir == "" {
		cfg.MetadataDir = d.Store.Path() + ".tuf"
	}
	a := &Agent{cfg: cfg, st: d.Store, src: d.Source, act: d.Activator, ev: d.Events, now: d.Now, log: d.Logger, sleep: clock.Sleep}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.disk = d.Disk; a.disk == nil {
		a.disk = StatfsDisk{}
	}
	var err error
	if a.imageRoot, err = readRoot(cfg.ImageRoot); err != nil {
		return nil, err
	}
	if cfg.DirectorRoot != "" {
		if a.directorRoot, err = readRoot(cfg.DirectorRoot); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func readRoot(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: pinned root: %v", ErrConfig, err)
	}
	if _, err := metadata.Root().FromBytes(b); err != nil {
		return nil, fmt.Errorf("%w: pinned root %s: %v", ErrConfig, path, err)
	}
	return b, nil
}

// BytesFetched is the chunk payload this agent has downloaded so far.
func (a *Agent) BytesFetched() int64 { return a.bytesIn.Load() }

// Apply installs the offered release: it fetches what the store lacks,
// verifies and stages it, runs its health check through the Activator and
// switches. Each step is journaled and reported. A refused release or a
// failed check leaves the running version as it was.
func (a *Agent) Apply(ctx context.Context) (store.Ref, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.apply(ctx)
}

func (a *Agent) apply(ctx context.Context) (store.Ref, error) {
	prev, err := a.readJournal(ctx)
	if err != nil {
		return store.Ref{}, err
	}
	o, err := a.Check(ctx)
	if err != nil {
		if prev.Phase.InProgress() && (errors.Is(err, ErrRefused) || errors.Is(err, ErrNoUpdate) || errors.Is(err, ErrNoRelease)) {
			a.abandon(ctx, prev, err)
		}
		if errors.Is(err, ErrRefused) {
			a.refuse(ctx, err)
		}
		return store.Ref{}, err
	}
	rel := o.Release
	if prev.Phase.InProgress() && (prev.Version != rel.Version || prev.Counter != rel.Counter) {
		a.abandon(ctx, prev, fmt.Errorf("%s@%s is offered now", rel.Name, rel.Version))
	}
	if err := a.checkSpace(rel, o.Missing); err != nil {
		// Refused for now, not for good: the next check offers it again,
		// and an interrupted download of it keeps what it has.
		a.refuse(ctx, err)
		if !prev.Phase.InProgress() {
			j := Journal{Phase: PhaseRefused, Model: rel.Name, Version: rel.Version, Counter: rel.Counter, Reason: err.Error()}
			err = errors.Join(err, a.writeJournal(ctx, j, nil))
		}
		return store.Ref{}, err
	}
	j := Journal{Phase: PhaseDownloading, Model: rel.Name, Version: rel.Version, Counter: rel.Counter, Total: o.Missing}
	if err := a.writeJournal(ctx, j, nil); err != nil {
		return store.Ref{}, err
	}
	offered := Event{Kind: EventOffered, Model: rel.Name, Version: rel.Version, Counter: rel.Counter, Total: o.Missing}
	if o.Rollback {
		offered.Reason = "the director assigns this older release: a rollback"
	}
	a.emit(ctx, offered)

	lastPct := -1.0
	ref, err := a.transfer(ctx, rel, func(done, total int64) {
		pct := 100.0
		if total > 0 {
			pct = float64(100*done) / float64(total)
		}
		if pct-lastPct >= 10 || done == total {
			lastPct = pct
			a.emit(ctx, Event{Kind: EventDownloading, Model: rel.Name, Version: rel.Version, Counter: rel.Counter, Done: done, Total: total, Percent: pct})
		}
	})
	if err != nil {
		if errors.Is(err, ErrRefused) {
			a.refuse(ctx, &releaseError{Version: rel.Version, Counter: rel.Counter, Err: err})
			j.Phase, j.Reason = PhaseRefused, err.Error()
			return store.Ref{}, errors.Join(err, a.writeJournal(ctx, j, nil))
		}
		return store.Ref{}, err // transport or local trouble: stays "downloading", resumable
	}
	a.emit(ctx, Event{Kind: EventVerified, Model: rel.Name, Version: rel.Version, Counter: rel.Counter})
	j.Phase, j.Done = PhaseStaged, j.Total
	if err := a.writeJournal(ctx, j, nil); err != nil {
		return store.Ref{}, err
	}
	a.emit(ctx, Event{Kind: EventStaged, Model: rel.Name, Version: rel.Version, Counter: rel.Counter})
	return ref, a.activate(ctx, rel, j)
}

// activate runs the health check and switches.
func (a *Agent) activate(ctx context.Context, rel *Release, j Journal) error {
	ref := rel.Ref()
	j.Phase = PhaseChecking
	if err := a.writeJournal(ctx, j, nil); err != nil {
		return err
	}
	var report *HealthReport
	check := func(ctx context.Context, g Generator, staged string) error {
		if rel.Health == nil {
			return nil // loading was the check
		}
		rep, err := RunHealth(ctx, g, staged, rel.Health, nil) // latency on the real clock
		report = &rep
		return err
	}
	var err error
	if a.act != nil {
		err = a.act.Swap(ctx, ref, check)
	}
	if err != nil {
		if ctx.Err() != nil {
			return err // interrupted, not failed: the journal says "checking", Resume runs it again
		}
		reason := err.Error()
		a.emit(ctx, Event{Kind: EventHealthFailed, Model: rel.Name, Version: rel.Version, Counter: rel.Counter, Reason: reason, Health: report})
		active := "nothing"
		if v, rerr := a.st.Resolve(ctx, rel.Name); rerr == nil {
			active = v.Ref().String()
		}
		a.emit(ctx, Event{Kind: EventRolledBack, Model: rel.Name, Version: rel.Version, Counter: rel.Counter,
			Reason: "health check failed; " + active + " keeps serving"})
		j.Phase, j.Reason = PhaseFailed, reason
		werr := a.writeJournal(ctx, j, map[string]string{"failed/" + rel.Name: strconv.FormatUint(rel.Counter, 10)})
		if !errors.Is(err, ErrHealth) {
			err = fmt.Errorf("%w: %w", ErrHealth, err)
		}
		if werr == nil {
			// The failed version will not be installed again (its counter
			// is recorded): it goes with its exported copy.
			a.retain(ctx, rel.Name)
		}
		return errors.Join(err, werr)
	}
	if a.act != nil {
		ev := Event{Kind: EventHealthOK, Model: rel.Name, Version: rel.Version, Counter: rel.Counter, Health: report}
		if report == nil {
			ev.Reason = "loaded; the release has no golden check"
		}
		a.emit(ctx, ev)
	}
	before := ""
	if v, err := a.st.Resolve(ctx, rel.Name); err == nil {
		before = v.Version
	}
	c, err := a.counters(ctx, rel.Name)
	if err != nil {
		return err
	}
	if err := a.st.Activate(ctx, ref.String()); err != nil {
		return err
	}
	j.Phase, j.Reason = PhaseActive, ""
	counts := map[string]string{"installed/" + rel.Name: strconv.FormatUint(rel.Counter, 10)}
	if before != rel.Version {
		// The store's previous version is now the one that was active:
		// its counter goes with it, for a rollback to restore.
		counts["previous/"+rel.Name] = strconv.FormatUint(c.installed, 10)
	}
	if err := a.writeJournal(ctx, j, counts); err != nil {
		return err
	}
	a.emit(ctx, Event{Kind: EventActive, Model: rel.Name, Version: rel.Version, Counter: rel.Counter})
	// Only now, with the journal saying active, is anything older removed:
	// a kill before this point resumes with every version still there.
	a.retain(ctx, rel.Name)
	return nil
}

// Resume continues an update a restart interrupted, or abandons it when it
// no longer applies (a newer release, or none). With nothing interrupted
// it returns the journal's phase and does nothing.
func (a *Agent) Resume(ctx context.Context) (Journal, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	j, err := a.readJournal(ctx)
	if err != nil || !j.Phase.InProgress() {
		return j, err
	}
	a.log.Info("update: resuming", "model", j.Model, "version", j.Version, "phase", j.Phase)
	_, err = a.apply(ctx)
	if errors.Is(err, ErrNoUpdate) {
		err = nil
	}
	j2, jerr := a.readJournal(ctx)
	return j2, errors.Join(err, jerr)
}

// Rollback switches back to the previous version, through the Activator
// when one runs (without a health check: the previous version served
// before), and records it. The release rolled back from is not installed
// again: only a release with a higher counter is.
func (a *Agent) Rollback(ctx context.Context) (store.Ref, error) {
	return a.RollbackFrom(ctx, "")
}

// RollbackFrom is Rollback of the release version, which must be the one
// active ("": whichever is): otherwise it returns ErrNotActive and changes
// nothing. The check and the switch are one step under the agent's lock:
// checked apart, an update the director assigned meanwhile (the same
// rollback, come by the check) was undone by the rollback that followed it,
// back to the release rolled back from (TestRollbackFromAfterCheck).
func (a *Agent) RollbackFrom(ctx context.Context, version string) (store.Ref, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur, err := a.st.Resolve(ctx, a.cfg.Model)
	if err != nil {
		return store.Ref{}, err
	}
	if version != "" && cur.Version != version {
		return store.Ref{}, fmt.Errorf("%w: %s is at %s, not %s", ErrNotActive, a.cfg.Model, cur.Version, version)
	}
	var prev string
	for e, err := range a.st.List(ctx) {
		if err != nil {
			return store.Ref{}, err
		}
		if e.Ref.Name == a.cfg.Model && e.Previous {
			prev = e.Ref.Version
		}
	}
	if prev == "" {
		return store.Ref{}, fmt.Errorf("update: rollback %s: %w", a.cfg.Model, store.ErrNoPrevious)
	}
	target := store.Ref{Name: a.cfg.Model, Version: prev}
	c, err := a.counters(ctx, a.cfg.Model)
	if err != nil {
		return store.Ref{}, err
	}
	// The floor is recorded before the switch: after a kill between the
	// two, the release rolled back from must still not come back.
	if err := a.setCounters(ctx, map[string]uint64{"rolledback/" + a.cfg.Model: max(c.rolledBack, c.installed)}); err != nil {
		return store.Ref{}, err
	}
	if a.act != nil {
		if err := a.act.Swap(ctx, target, nil); err != nil {
			return store.Ref{}, fmt.Errorf("update: rollback to %s: %w", target, err)
		}
	}
	ref, err := a.st.Rollback(ctx, a.cfg.Model)
	if err != nil {
		return store.Ref{}, err
	}
	// installed/NAME follows the store's active version back down: it is
	// what the next check compares against, and a device that kept the
	// counter of the release it left would take its director's assignment
	// of the release it now runs for a rollback attack. (A journal from
	// before previous/NAME was kept has 0 there: with a director the next
	// check re-checks the active release and records its counter; without
	// one the floor alone keeps older releases out.)
	j := Journal{Phase: PhaseRolledBack, Model: ref.Name, Version: ref.Version, Counter: c.previous, Reason: "manual rollback from " + cur.Version}
	if err := a.writeJournal(ctx, j, map[string]string{
		"installed/" + a.cfg.Model: strconv.FormatUint(c.previous, 10),
		"previous/" + a.cfg.Model:  strconv.FormatUint(c.installed, 10),
	}); err != nil {
		return ref, err
	}
	a.emit(ctx, Event{Kind: EventRolledBack, Model: ref.Name, Version: ref.Version, Counter: c.previous, Reason: j.Reason})
	a.retain(ctx, ref.Name) // the export of the version rolled back from
	return ref, nil
}

// Status is what `edgeinfer update status` shows.
type Status struct {
	Model     string  `json:"model"`
	Active    string  `json:"active,omitempty"`
	Previous  string  `json:"previous,omitempty"`
	Installed uint64  `json:"installed_counter"`
	Journal   Journal `json:"journal"`
}

// Status reads the store's pointers and the journal.
func (a *Agent) Status(ctx context.Context) (Status, error) {
	s := Status{Model: a.cfg.Model}
	for e, err := range a.st.List(ctx) {
		if err != nil {
			return s, err
		}
		if e.Ref.Name != a.cfg.Model {
			continue
		}
		if e.Active {
			s.Active = e.Ref.Version
		}
		if e.Previous {
			s.Previous = e.Ref.Version
		}
	}
	var err error
	if s.Installed, err = a.counter(ctx, "installed/"+a.cfg.Model); err != nil {
		return s, err
	}
	s.Journal, err = a.readJournal(ctx)
	return s, err
}

// refuse reports a refusal; the release refused, when the error names
// one (a releaseError in its chain), is the event's version.
func (a *Agent) refuse(ctx context.Context, err error) {
	e := Event{Kind: EventRefused, Model: a.cfg.Model, Reason: err.Error()}
	if re, ok := errors.AsType[*releaseError](err); ok {
		e.Version, e.Counter = re.Version, re.Counter
	}
	a.emit(ctx, e)
}

func (a *Agent) abandon(ctx context.Context, j Journal, why error) {
	reason := fmt.Sprintf("interrupted update to %s@%s abandoned: %v", j.Model, j.Version, why)
	j.Phase, j.Reason = PhaseAbandoned, reason
	// A staged version nobody will activate goes (its chunks at the next
	// GC); the active and previous ones stay whatever the journal says.
	for e, err := range a.st.List(ctx) {
		if err == nil && e.Ref.Name == j.Model && e.Ref.Version == j.Version && !e.Active && !e.Previous {
			if err := a.st.Remove(ctx, e.Ref.String()); err != nil {
				a.log.Warn("update: remove abandoned version", "ref", e.Ref.String(), "err", err)
			}
		}
	}
	if err := a.writeJournal(ctx, j, nil); err != nil {
		a.log.Warn("update: journal", "err", err)
	}
	a.emit(ctx, Event{Kind: EventAbandoned, Model: j.Model, Version: j.Version, Counter: j.Counter, Reason: reason})
}

func (a *Agent) emit(ctx context.Context, e Event) {
	e.Time = a.now().UTC()
	a.log.Debug("update: event", "kind", e.Kind, "model", e.Model, "version", e.Version, "reason", e.Reason)
	if a.ev == nil {
		return
	}
	if err := a.ev.Emit(ctx, e); err != nil {
		a.log.Warn("update: event not recorded", "kind", e.Kind, "err", err)
	}
}
