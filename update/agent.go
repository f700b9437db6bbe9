package update

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	imageRoot    []byte
	directorRoot []byte

	mu      sync.Mutex // one update at a time
	bytesIn atomic.Int64
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
	a := &Agent{cfg: cfg, st: d.Store, src: d.Source, act: d.Activator, ev: d.Events, now: d.Now, log: d.Logger, sleep: sleepCtx}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
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

// Offer is a release that is signed, assigned to this device (when a
// director is used), compatible with it and newer than what it runs.
type Offer struct {
	Target  string   `json:"target"`
	Release *Release `json:"release"`
	// Missing is how many bytes of it the store lacks.
	Missing int64 `json:"missing"`
}

// Check refreshes the trusted metadata and returns the release this device
// should install. Up to date is ErrNoUpdate; a release that must not be
// installed is an ErrRefused error with its reason.
func (a *Agent) Check(ctx context.Context) (*Offer, error) {
	ref, err := a.refTime(ctx)
	if err != nil {
		return nil, err
	}
	// The clock floor rises with every reading, refused or not: a check
	// that found metadata expired must not pass after the clock went back.
	if err := a.raiseClockFloor(ctx, ref); err != nil {
		return nil, err
	}
	images, _, err := trustedTargets(ctx, a.src, RepoImage, a.imageRoot, a.cfg.MetadataDir, ref)
	if err != nil {
		return nil, err
	}
	candidates := images
	if a.directorRoot != nil {
		assigned, _, err := trustedTargets(ctx, a.src, RepoDirector, a.directorRoot, a.cfg.MetadataDir, ref)
		if err != nil {
			return nil, err
		}
		if candidates, err = a.assigned(assigned, images); err != nil {
			return nil, err
		}
	}
	// The newest release of the model by counter; the others are history.
	var best *Release
	var bestPath string
	for path, tf := range candidates {
		if !strings.HasPrefix(path, a.cfg.Model+"/") {
			continue
		}
		rel, err := releaseOf(path, tf)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRefused, err)
		}
		if rel.Name != a.cfg.Model {
			continue
		}
		if best == nil || rel.Counter > best.Counter {
			best, bestPath = rel, path
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: no release of %s is signed%s", ErrNoUpdate, a.cfg.Model, map[bool]string{true: " and assigned to this device"}[a.directorRoot != nil])
	}
	installed, err := a.counter(ctx, "installed/"+a.cfg.Model)
	if err != nil {
		return nil, err
	}
	failed, err := a.counter(ctx, "failed/"+a.cfg.Model)
	if err != nil {
		return nil, err
	}
	switch {
	case best.Counter < installed:
		return nil, fmt.Errorf("%w: %w: %s@%s has counter %d, the device installed counter %d",
			ErrRefused, ErrRollback, best.Name, best.Version, best.Counter, installed)
	case best.Counter == installed:
		return nil, fmt.Errorf("%w: %s@%s (counter %d) is installed", ErrNoUpdate, best.Name, best.Version, best.Counter)
	case best.Counter <= failed:
		return nil, fmt.Errorf("%w: %s@%s (counter %d) failed its health check here before", ErrNoUpdate, best.Name, best.Version, best.Counter)
	}
	if err := best.Compatible(a.cfg.Device); err != nil {
		if errors.Is(err, ErrIncompatible) {
			return nil, fmt.Errorf("%w: %w", ErrRefused, err)
		}
		return nil, err
	}
	st := a.st.Stage()
	missing, err := st.Missing(ctx, best.Files)
	st.Close()
	if err != nil {
		return nil, err
	}
	o := &Offer{Target: bestPath, Release: best}
	for _, c := range missing {
		o.Missing += c.Size
	}
	return o, nil
}

// releaseOf parses a signed target's release and ties it to the target's
// own length and hash: those are the bundle manifest's.
func releaseOf(path string, tf *metadata.TargetFiles) (*Release, error) {
	if tf.Custom == nil {
		return nil, fmt.Errorf("%w: target %s has no custom field", ErrBadMetadata, path)
	}
	rel, err := ParseRelease(*tf.Custom)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", path, err)
	}
	if TargetPath(rel.Name, rel.Version) != path {
		return nil, fmt.Errorf("%w: target %s holds release %s@%s", ErrBadMetadata, path, rel.Name, rel.Version)
	}
	for _, f := range rel.Files {
		if f.Path != store.ManifestFile {
			continue
		}
		if f.Size != tf.Length || !strings.EqualFold(f.SHA256.String(), fmt.Sprintf("%x", []byte(tf.Hashes["sha256"]))) {
			return nil, fmt.Errorf("%w: target %s: its %s is %d bytes sha256 %s, the target says %d bytes sha256 %x",
				ErrBadMetadata, path, store.ManifestFile, f.Size, f.SHA256, tf.Length, []byte(tf.Hashes["sha256"]))
		}
	}
	return rel, nil
}

// assigned returns the image targets the director assigns to this device.
// The director says which and when, never what: a target it names must be
// signed by the image repository with the same length and hashes, and the
// release is read from the image repository's copy.
func (a *Agent) assigned(director, images map[string]*metadata.TargetFiles) (map[string]*metadata.TargetFiles, error) {
	out := map[string]*metadata.TargetFiles{}
	for path, tf := range director {
		if !a.assignedHere(tf) {
			continue
		}
		img, ok := images[path]
		if !ok {
			return nil, fmt.Errorf("%w: %w: director assigns %s, which the image repository does not sign", ErrRefused, ErrNotSigned, path)
		}
		if !img.Equal(*tf) || len(tf.Hashes) == 0 {
			return nil, fmt.Errorf("%w: %w: director assigns %s with length %d and hashes other than the image repository's (%d)",
				ErrRefused, ErrNotSigned, path, tf.Length, img.Length)
		}
		out[path] = img
	}
	return out, nil
}

// Assignment is a director target's custom field: the devices it is for
// (empty: every device of the fleet).
type Assignment struct {
	Devices []string `json:"devices,omitempty"`
}

func (a *Agent) assignedHere(tf *metadata.TargetFiles) bool {
	if tf.Custom == nil {
		return true
	}
	var asg Assignment
	if err := json.Unmarshal(*tf.Custom, &asg); err != nil {
		return false // an assignment this device cannot read is not for it
	}
	if len(asg.Devices) == 0 {
		return true
	}
	for _, d := range asg.Devices {
		if d == a.cfg.Device.ID {
			return true
		}
	}
	return false
}

// refTime is the time expiry is checked against. Boards without a
// real-time clock boot with a clock in 1970 (or wherever it stopped): then
// the clock floor — the latest time this device has seen while its clock
// was at least that late, kept in the journal — is used instead. This
// policy never lets a clock that went back accept metadata that had
// already expired when last checked; what it cannot do is notice metadata
// that expired while the clock stood still. Boards without an RTC should
// get time from NTP, GNSS or the link before updating; the floor is the
// fallback, not the clock.
func (a *Agent) refTime(ctx context.Context) (time.Time, error) {
	now := a.now().UTC()
	floor, err := a.clockFloor(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("update: clock floor: %w", err)
	}
	if now.Before(floor) {
		a.log.Warn("update: clock is behind the last trusted time; checking expiry against the floor", "now", now, "floor", floor)
		return floor, nil
	}
	return now, nil
}

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
		if prev.Phase.InProgress() && (errors.Is(err, ErrRefused) || errors.Is(err, ErrNoUpdate)) {
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
	j := Journal{Phase: PhaseDownloading, Model: rel.Name, Version: rel.Version, Counter: rel.Counter, Total: o.Missing}
	if err := a.writeJournal(ctx, j, nil); err != nil {
		return store.Ref{}, err
	}
	a.emit(ctx, Event{Kind: EventOffered, Model: rel.Name, Version: rel.Version, Counter: rel.Counter, Total: o.Missing})

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
			a.refuse(ctx, err)
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
		return errors.Join(err, werr)
	}
	if a.act != nil {
		ev := Event{Kind: EventHealthOK, Model: rel.Name, Version: rel.Version, Counter: rel.Counter, Health: report}
		if report == nil {
			ev.Reason = "loaded; the release has no golden check"
		}
		a.emit(ctx, ev)
	}
	if err := a.st.Activate(ctx, ref.String()); err != nil {
		return err
	}
	j.Phase, j.Reason = PhaseActive, ""
	if err := a.writeJournal(ctx, j, map[string]string{"installed/" + rel.Name: strconv.FormatUint(rel.Counter, 10)}); err != nil {
		return err
	}
	a.emit(ctx, Event{Kind: EventActive, Model: rel.Name, Version: rel.Version, Counter: rel.Counter})
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
	a.mu.Lock()
	defer a.mu.Unlock()
	cur, err := a.st.Resolve(ctx, a.cfg.Model)
	if err != nil {
		return store.Ref{}, err
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
	if a.act != nil {
		if err := a.act.Swap(ctx, target, nil); err != nil {
			return store.Ref{}, fmt.Errorf("update: rollback to %s: %w", target, err)
		}
	}
	ref, err := a.st.Rollback(ctx, a.cfg.Model)
	if err != nil {
		return store.Ref{}, err
	}
	j := Journal{Phase: PhaseRolledBack, Model: ref.Name, Version: ref.Version, Reason: "manual rollback from " + cur.Version}
	if err := a.writeJournal(ctx, j, nil); err != nil {
		return ref, err
	}
	a.emit(ctx, Event{Kind: EventRolledBack, Model: ref.Name, Version: ref.Version, Reason: j.Reason})
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

func (a *Agent) refuse(ctx context.Context, err error) {
	a.emit(ctx, Event{Kind: EventRefused, Model: a.cfg.Model, Reason: err.Error()})
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
