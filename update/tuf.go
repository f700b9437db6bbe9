package update

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"
	"github.com/theupdateframework/go-tuf/v2/metadata/config"
	"github.com/theupdateframework/go-tuf/v2/metadata/updater"
)

// fetcherBase is the pseudo-URL go-tuf's updater builds metadata names on;
// sourceFetcher strips it again.
const fetcherBase = "edgeinfer-source:///"

// sourceFetcher is go-tuf's pluggable fetcher over a Source. go-tuf's
// interface has no context, so one is made per refresh with the caller's.
type sourceFetcher struct {
	ctx  context.Context
	src  Source
	repo string
	// device, when set, reads a device's own chain: its timestamp,
	// snapshot and targets under repo/devices/<device>/, the root shared
	// with the repository's (DeviceMetaPrefix).
	device string
	// noTimestamp is set when the timestamp was not found.
	noTimestamp *bool
}

// DeviceMetaPrefix is where a device's own director chain lives in the
// repository layout: director/devices/<id>/timestamp.json, N.snapshot.json
// and N.targets.json, under the director's root (director/N.root.json).
// Uptane's director signs metadata per device for the same reason: a
// device's assignment is then as large as its own targets, whatever the
// size of the fleet.
func DeviceMetaPrefix(device string) string { return RepoDirector + "/devices/" + device + "/" }

// DownloadFile implements fetcher.Fetcher. An absent file must look like an
// HTTP 404 to the updater: that is how it learns the newest root.
func (f sourceFetcher) DownloadFile(u string, maxLength int64, _ time.Duration) ([]byte, error) {
	name := strings.TrimPrefix(u, fetcherBase)
	full := f.repo + "/" + name
	if f.device != "" && !strings.HasSuffix(name, "root.json") {
		full = DeviceMetaPrefix(f.device) + name
	}
	b, err := f.src.FetchMeta(f.ctx, full, maxLength)
	if errors.Is(err, ErrNotFound) {
		if name == "timestamp.json" && f.noTimestamp != nil {
			*f.noTimestamp = true
		}
		return nil, &metadata.ErrDownloadHTTP{StatusCode: 404, URL: full}
	}
	return b, err
}

// chain names one TUF metadata chain a device trusts: a repository's
// (image, director) or the director's chain for this device alone.
type chain struct {
	repo   string // RepoImage or RepoDirector
	device string // the device's own chain of repo: its id
}

// local is the chain's directory under the device's metadata dir.
func (c chain) local() string {
	if c.device != "" {
		return c.repo + ".device" // one device, one chain: no id in the name
	}
	return c.repo
}

// trustedTargets runs the TUF client workflow (root rotation, timestamp,
// snapshot, targets: spec 1.0 section 5) for one repository and returns
// its verified top-level targets. The metadata dir keeps what is trusted
// between runs (go-tuf writes each file atomically by rename); the pinned
// root is used only until a newer trusted root is there.
func trustedTargets(ctx context.Context, src Source, repo string, pinnedRoot []byte, dir string, ref time.Time) (map[string]*metadata.TargetFiles, *trustedInfo, error) {
	return chainTargets(ctx, src, chain{repo: repo}, pinnedRoot, dir, ref, nil)
}

// deviceTargets is trustedTargets for the director's chain of device
// alone. A device the director never wrote a chain for has no
// assignments of its own (nil, nil); one whose chain it trusted before
// and now finds absent gets the source's error, as for any file missing.
func deviceTargets(ctx context.Context, src Source, device string, pinnedRoot []byte, dir string, ref time.Time) (map[string]*metadata.TargetFiles, error) {
	c := chain{repo: RepoDirector, device: device}
	_, err := os.Stat(filepath.Join(dir, c.local(), "timestamp.json"))
	trustedBefore := err == nil
	var absent bool
	targets, _, err := chainTargets(ctx, src, c, pinnedRoot, dir, ref, &absent)
	if err != nil && absent && !trustedBefore {
		return nil, nil
	}
	return targets, err
}

// chainTargets is trustedTargets for chain c; noTimestamp, when not nil,
// is set when the chain's timestamp was not found.
func chainTargets(ctx context.Context, src Source, c chain, pinnedRoot []byte, dir string, ref time.Time, noTimestamp *bool) (map[string]*metadata.TargetFiles, *trustedInfo, error) {
	repo := c.repo
	dir = filepath.Join(dir, c.local())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("update: metadata dir: %w", err)
	}
	root := pinnedRoot
	if b, err := os.ReadFile(filepath.Join(dir, "root.json")); err == nil {
		root = b
	}
	cfg, err := config.New(fetcherBase, root)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrConfig, repo, err)
	}
	cfg.LocalMetadataDir = dir
	cfg.LocalTargetsDir = filepath.Join(dir, "targets") // never written: targets are chunked, not files
	cfg.Fetcher = sourceFetcher{ctx: ctx, src: src, repo: repo, device: c.device, noTimestamp: noTimestamp}
	cfg.PrefixTargetsWithHash = false
	up, err := updater.New(cfg)
	if err != nil {
		return nil, nil, classify(repo, err)
	}
	// The reference time for expiry: the caller's clock policy (see
	// Agent's clock floor for boards without a real-time clock). go-tuf
	// names this hook "unsafe" because a wrong time weakens the freeze
	// check; here it is how that check gets a time at all.
	up.UnsafeSetRefTime(ref)
	if err := up.Refresh(); err != nil {
		return nil, nil, classify(repo, err)
	}
	set := up.GetTrustedMetadataSet()
	info := &trustedInfo{
		Root: set.Root.Signed.Version, Timestamp: set.Timestamp.Signed.Version,
		Snapshot: set.Snapshot.Signed.Version, Targets: set.Targets[metadata.TARGETS].Signed.Version,
		Expires: set.Timestamp.Signed.Expires,
	}
	return up.GetTopLevelTargets(), info, nil
}

// trustedInfo is what a refresh trusted, for status.
type trustedInfo struct {
	Root      int64     `json:"root"`
	Timestamp int64     `json:"timestamp"`
	Snapshot  int64     `json:"snapshot"`
	Targets   int64     `json:"targets"`
	Expires   time.Time `json:"timestamp_expires"`
}

// classify turns go-tuf's errors into this package's refusal reasons.
// go-tuf reports a rolled-back version and a snapshot that does not match
// the metadata it lists with the same type; the message tells them apart.
func classify(repo string, err error) error {
	var (
		unsigned  *metadata.ErrUnsignedMetadata
		expired   *metadata.ErrExpiredMetadata
		badVer    *metadata.ErrBadVersionNumber
		lenHash   *metadata.ErrLengthOrHashMismatch
		tooLong   *metadata.ErrDownloadLengthMismatch
		repoErr   *metadata.ErrRepository
		valueErr  *metadata.ErrValue
		typeErr   *metadata.ErrType
		download  *metadata.ErrDownload
		httpError *metadata.ErrDownloadHTTP
	)
	refused := func(reason error) error {
		return fmt.Errorf("%w: %w: %s repository: %v", ErrRefused, reason, repo, err)
	}
	switch {
	case errors.Is(err, ErrTooLarge), errors.As(err, &tooLong):
		return refused(ErrTooLarge)
	case errors.Is(err, ErrSource), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &download), errors.As(err, &httpError):
		return fmt.Errorf("%w: %s repository: %w", ErrSource, repo, err)
	case errors.As(err, &unsigned):
		return refused(ErrSignature)
	case errors.As(err, &expired):
		return refused(ErrFreeze)
	case errors.As(err, &badVer):
		if strings.Contains(badVer.Msg, "must be >=") || strings.Contains(badVer.Msg, "bad version number") {
			return refused(ErrRollback)
		}
		return refused(ErrMixAndMatch)
	case errors.As(err, &lenHash):
		return refused(ErrMixAndMatch)
	case errors.As(err, &repoErr), errors.As(err, &valueErr), errors.As(err, &typeErr):
		return refused(ErrBadMetadata)
	case errors.Is(err, ErrBadMetadata):
		return refused(ErrBadMetadata)
	}
	// Anything else from go-tuf (a JSON error, an unknown role) is still
	// metadata the device cannot trust.
	return refused(ErrBadMetadata)
}
