package update

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// Offer is a release that is signed, assigned to this device (when a
// director is used), compatible with it and newer than what it runs.
type Offer struct {
	Target  string   `json:"target"`
	Release *Release `json:"release"`
	// Missing is how many bytes of it the store lacks.
	Missing int64 `json:"missing"`
	// Rollback: the director assigns this device a release older than the
	// one installed (an operator's rollback), see Agent.decide.
	Rollback bool `json:"rollback,omitempty"`
}

// Check refreshes the trusted metadata and returns the release this device
// should install. Up to date is ErrNoUpdate; a release that must not be
// installed is an ErrRefused error with its reason.
func (a *Agent) Check(ctx context.Context) (*Offer, error) {
	ref, err := a.refTime(ctx)
	if err != nil {
		return nil, err
	}
	// The clock floor rises with every reading, refused or not — a check
	// that found metadata expired must not pass after the clock went
	// back — but never past the expiry of the newest timestamp trusted,
	// so one reading of a clock far in the future cannot make every later
	// timestamp look expired.
	if trusted, err := a.trustedExpiry(ctx); err != nil {
		return nil, err
	} else if !trusted.IsZero() {
		if err := a.raiseClockFloor(ctx, minTime(ref, trusted.Add(time.Millisecond))); err != nil {
			return nil, err
		}
	}
	// The director first, then the image repository (Uptane's order): a
	// release is signed before it is assigned, so an assignment read
	// first names a release the image metadata read after it signs. In
	// the other order a check under way when a release is published and
	// assigned at once saw the assignment and not the release, and
	// refused it as unsigned.
	var assigned map[string]*metadata.TargetFiles
	if a.directorRoot != nil {
		var err error
		if assigned, _, err = trustedTargets(ctx, a.src, RepoDirector, a.directorRoot, a.cfg.MetadataDir, ref); err != nil {
			return nil, err
		}
		// The director's fleet-wide assignments are in its own chain;
		// those naming devices, in each device's chain (DeviceMetaPrefix).
		// A device reads both: the union is what it is assigned.
		if a.cfg.Device.ID != "" {
			own, err := deviceTargets(ctx, a.src, a.cfg.Device.ID, a.directorRoot, a.cfg.MetadataDir, ref)
			if err != nil {
				return nil, err
			}
			assigned = maps.Clone(assigned)
			maps.Copy(assigned, own)
		}
	}
	images, info, err := trustedTargets(ctx, a.src, RepoImage, a.imageRoot, a.cfg.MetadataDir, ref)
	if err != nil {
		return nil, err
	}
	if err := a.setTrustedExpiry(ctx, info.Expires); err != nil {
		return nil, err
	}
	if err := a.raiseClockFloor(ctx, minTime(ref, info.Expires)); err != nil {
		return nil, err
	}
	candidates := images
	if a.directorRoot != nil {
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
			return nil, fmt.Errorf("%w: %w", ErrRefused, refusedRelease(path, err))
		}
		if rel.Name != a.cfg.Model {
			continue
		}
		if best == nil || rel.Counter > best.Counter {
			best, bestPath = rel, path
		}
	}
	if best == nil {
		if a.directorRoot != nil && signsModel(images, a.cfg.Model) {
			return nil, fmt.Errorf("%w: no release of %s is assigned to this device (%s)", ErrNoUpdate, a.cfg.Model, a.cfg.Device.ID)
		}
		return nil, fmt.Errorf("%w: %s; the image repository signs %s", ErrNoRelease, a.cfg.Model, signedModels(images))
	}
	rollback, err := a.decide(ctx, best)
	if err != nil {
		return nil, err
	}
	if err := best.Compatible(a.cfg.Device); err != nil {
		if errors.Is(err, ErrIncompatible) {
			return nil, fmt.Errorf("%w: %w", ErrRefused, &releaseError{Version: best.Version, Counter: best.Counter, Err: err})
		}
		return nil, err
	}
	st := a.st.Stage()
	missing, err := st.Missing(ctx, best.Files)
	st.Close()
	if err != nil {
		return nil, err
	}
	o := &Offer{Target: bestPath, Release: best, Rollback: rollback}
	for _, c := range missing {
		o.Missing += c.Size
	}
	return o, nil
}

// decide says whether best, the newest release signed (and, with a
// director, assigned to this device), is to be installed. It returns
// ErrNoUpdate when best is what runs, failed its check here or was rolled
// back from here; an ErrRefused ErrRollback error when the image
// repository alone offers a release older than the one installed; and
// rollback true when the director assigns an older release.
//
// The counter guards against the image repository (or a thief of its
// targets key) withdrawing newer releases to push devices back to an
// older, vulnerable one. With a director, Uptane gives the choice of which
// signed image a device runs to the director: only what it assigns is a
// candidate at all, its metadata cannot be replayed (TUF refuses a version
// older than the one trusted), and its assignment of an older release to
// this device is an operator's rollback, signed like any assignment.
// Refusing it would leave the device refusing its own fleet's assignment
// at every check, and the fleet counting it as a failure of every later
// rollout.
func (a *Agent) decide(ctx context.Context, best *Release) (rollback bool, err error) {
	c, err := a.counters(ctx, a.cfg.Model)
	if err != nil {
		return false, err
	}
	active := ""
	if v, err := a.st.Resolve(ctx, a.cfg.Model); err == nil {
		active = v.Version
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	switch {
	case best.Version == active && best.Counter <= c.installed:
		// A counter above the installed one means the journal lags the
		// store (a kill between the switch and its record): install
		// again, which only checks and records it.
		return false, fmt.Errorf("%w: %s@%s (counter %d) is installed", ErrNoUpdate, best.Name, best.Version, best.Counter)
	case best.Counter < c.installed && a.directorRoot == nil:
		return false, fmt.Errorf("%w: %w", ErrRefused, &releaseError{Version: best.Version, Counter: best.Counter,
			Err: fmt.Errorf("%w: %s@%s has counter %d, the device installed counter %d", ErrRollback, best.Name, best.Version, best.Counter, c.installed)})
	case best.Counter < c.installed:
		// The director's rollback. failed/NAME is a floor for newer
		// releases only; an older one is skipped only if it is the very
		// release whose check failed last, so a failing rollback is not
		// retried at every check.
		j, err := a.readJournal(ctx)
		if err != nil {
			return false, err
		}
		if j.Phase == PhaseFailed && j.Version == best.Version && j.Counter == best.Counter {
			return false, fmt.Errorf("%w: %s@%s (counter %d) failed its health check here before", ErrNoUpdate, best.Name, best.Version, best.Counter)
		}
		return true, nil
	case best.Counter <= c.failed:
		return false, fmt.Errorf("%w: %s@%s (counter %d) failed its health check here before", ErrNoUpdate, best.Name, best.Version, best.Counter)
	case best.Counter <= c.rolledBack:
		return false, fmt.Errorf("%w: %s@%s (counter %d) was rolled back from here; only a release with a counter above %d is installed",
			ErrNoUpdate, best.Name, best.Version, best.Counter, c.rolledBack)
	}
	return false, nil
}

// signsModel says whether targets hold a release of model.
func signsModel(targets map[string]*metadata.TargetFiles, model string) bool {
	for path := range targets {
		if strings.HasPrefix(path, model+"/") {
			return true
		}
	}
	return false
}

// signedModels lists the models targets hold releases of, with their
// latest versions, for an error message.
func signedModels(targets map[string]*metadata.TargetFiles) string {
	byModel := map[string][]string{}
	for path := range targets {
		if name, version, ok := strings.Cut(path, "/"); ok {
			byModel[name] = append(byModel[name], version)
		}
	}
	if len(byModel) == 0 {
		return "no releases at all"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(byModel)) {
		vs := byModel[name]
		slices.Sort(vs)
		list := strings.Join(vs, ",")
		if len(vs) > 5 {
			list = "…," + strings.Join(vs[len(vs)-5:], ",")
		}
		parts = append(parts, name+"@"+list)
	}
	return "releases of " + strings.Join(parts, "; ")
}

// releaseError ties a refusal to the release it refused, so the refused
// event names it.
type releaseError struct {
	Version string
	Counter uint64
	Err     error
}

func (e *releaseError) Error() string { return e.Err.Error() }
func (e *releaseError) Unwrap() error { return e.Err }

// refusedRelease wraps err with the release version of a target path
// ("name/version").
func refusedRelease(path string, err error) error {
	_, version, _ := strings.Cut(path, "/")
	return &releaseError{Version: version, Err: err}
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
			return nil, fmt.Errorf("%w: %w", ErrRefused, refusedRelease(path,
				fmt.Errorf("%w: director assigns %s, which the image repository does not sign", ErrNotSigned, path)))
		}
		if !img.Equal(*tf) || len(tf.Hashes) == 0 {
			return nil, fmt.Errorf("%w: %w", ErrRefused, refusedRelease(path,
				fmt.Errorf("%w: director assigns %s with length %d and hashes other than the image repository's (%d)",
					ErrNotSigned, path, tf.Length, img.Length)))
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

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// refTime is the time expiry is checked against. Boards without a
// real-time clock boot with a clock in 1970 (or wherever it stopped): then
// the clock floor — the latest time this device's clock has shown at a
// check, capped at the newest trusted timestamp's expiry, kept in the
// journal — is used instead. This
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
