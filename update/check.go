package update

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
