package fleet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// Role expiry defaults: the root is signed offline and rarely; the
// timestamp is refreshed by an online job (RefreshTimestamp) and expires
// soonest, which bounds how long a freeze can go unnoticed.
const (
	DefaultRootExpiry      = 365 * 24 * time.Hour
	DefaultTargetsExpiry   = 90 * 24 * time.Hour
	DefaultSnapshotExpiry  = 30 * 24 * time.Hour
	DefaultTimestampExpiry = 24 * time.Hour
)

// maxTargetsBytes is go-tuf's default limit on targets.json, which the
// device keeps: a repository larger than that could not be read.
const maxTargetsBytes = 5_000_000

// repo is one TUF repository (image or director) in <dir>/<name>/: the
// files a device fetches, and the keys at hand to sign them.
type repo struct {
	dir, name string
	root      *metadata.Metadata[metadata.RootType]
	targets   *metadata.Metadata[metadata.TargetsType]
	snapshot  *metadata.Metadata[metadata.SnapshotType]
	timestamp *metadata.Metadata[metadata.TimestampType]
	keys      map[string]*Key // by key id
	now       func() time.Time
	expiry    map[string]time.Duration
}

func (r *repo) path(file string) string { return filepath.Join(r.dir, r.name, file) }

// initRepo writes version 1 of every role, with fresh keys.
func initRepo(dir, name, keyDir, rootKeyDir string, o InitOptions, now func() time.Time) (*repo, error) {
	r := &repo{dir: dir, name: name, keys: map[string]*Key{}, now: now, expiry: o.expiry()}
	if _, err := os.Stat(r.path("1.root.json")); err == nil {
		return nil, fmt.Errorf("%w: %s already holds a repository", ErrRepo, r.path(""))
	}
	t := now().UTC()
	r.root = metadata.Root(t.Add(r.expiry[metadata.ROOT]))
	r.targets = metadata.Targets(t.Add(r.expiry[metadata.TARGETS]))
	r.snapshot = metadata.Snapshot(t.Add(r.expiry[metadata.SNAPSHOT]))
	r.timestamp = metadata.Timestamp(t.Add(r.expiry[metadata.TIMESTAMP]))
	counts := map[string][2]int{
		metadata.ROOT:      {max(o.RootKeys, 1), max(o.RootThreshold, 1)},
		metadata.TARGETS:   {max(o.TargetsKeys, 1), max(o.TargetsThreshold, 1)},
		metadata.SNAPSHOT:  {1, 1},
		metadata.TIMESTAMP: {1, 1},
	}
	for role, c := range counts {
		if c[1] > c[0] {
			return nil, fmt.Errorf("%w: %s threshold %d with %d keys", ErrKeys, role, c[1], c[0])
		}
		kd := keyDir
		if role == metadata.ROOT && rootKeyDir != "" {
			kd = rootKeyDir
		}
		for range c[0] {
			k, err := GenerateKey(kd, name, role)
			if err != nil {
				return nil, err
			}
			r.keys[k.ID] = k
			if err := r.root.Signed.AddKey(k.PublicKey(), role); err != nil {
				return nil, err
			}
		}
		r.root.Signed.Roles[role].Threshold = c[1]
	}
	if err := os.MkdirAll(r.path(""), 0o755); err != nil {
		return nil, err
	}
	if err := r.signWrite(metadata.ROOT); err != nil {
		return nil, err
	}
	// commit numbers every role from 1.
	r.targets.Signed.Version, r.snapshot.Signed.Version, r.timestamp.Signed.Version = 0, 0, 0
	return r, r.commit(true)
}

// openRepo reads the newest metadata of every role and the keys at hand.
func openRepo(dir, name string, keys []*Key, o InitOptions, now func() time.Time) (*repo, error) {
	r := &repo{dir: dir, name: name, keys: map[string]*Key{}, now: now, expiry: o.expiry()}
	if err := r.load(); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if k.Repo == name {
			r.keys[k.ID] = k
		}
	}
	return r, nil
}

// load reads the newest metadata of every role from disk: the newest root,
// the timestamp, and the snapshot and targets versions it names.
func (r *repo) load() error {
	n, err := newestRoot(r.path(""))
	if err != nil {
		return err
	}
	if r.root, err = metadata.Root().FromFile(r.path(fmt.Sprintf("%d.root.json", n))); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRepo, r.name, err)
	}
	if r.timestamp, err = metadata.Timestamp().FromFile(r.path("timestamp.json")); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRepo, r.name, err)
	}
	sv := r.timestamp.Signed.Meta["snapshot.json"].Version
	if r.snapshot, err = metadata.Snapshot().FromFile(r.path(fmt.Sprintf("%d.snapshot.json", sv))); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRepo, r.name, err)
	}
	tv := r.snapshot.Signed.Meta["targets.json"].Version
	if r.targets, err = metadata.Targets().FromFile(r.path(fmt.Sprintf("%d.targets.json", tv))); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRepo, r.name, err)
	}
	return nil
}

func newestRoot(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrRepo, err)
	}
	var n int64
	for _, e := range ents {
		v, ok := strings.CutSuffix(e.Name(), ".root.json")
		if !ok {
			continue
		}
		if i, err := strconv.ParseInt(v, 10, 64); err == nil && i > n {
			n = i
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: no N.root.json in %s (run keygen first)", ErrRepo, dir)
	}
	return n, nil
}

// sign signs role's metadata with every key at hand that the root lists
// for it, and fails unless that meets the role's threshold.
func (r *repo) sign(role string) error {
	switch role {
	case metadata.ROOT:
		return signRole(r, role, r.root)
	case metadata.TARGETS:
		return signRole(r, role, r.targets)
	case metadata.SNAPSHOT:
		return signRole(r, role, r.snapshot)
	}
	return signRole(r, role, r.timestamp)
}

// signRole signs md as r's role (the repository's own files and the
// director's device chains alike).
func signRole[T metadata.Roles](r *repo, role string, md *metadata.Metadata[T]) error {
	want := r.root.Signed.Roles[role]
	var signers []*Key
	for _, id := range want.KeyIDs {
		if k, ok := r.keys[id]; ok {
			signers = append(signers, k)
		}
	}
	if len(signers) < want.Threshold {
		return fmt.Errorf("%w: %s %s needs %d signatures, %d of its keys are at hand", ErrKeys, r.name, role, want.Threshold, len(signers))
	}
	for _, k := range signers {
		if _, err := md.Sign(k.Signer()); err != nil {
			return err
		}
	}
	return nil
}

// signWrite clears, signs and writes one role's file (consistent
// snapshots: versioned names except the timestamp).
func (r *repo) signWrite(role string) error {
	var (
		b    []byte
		err  error
		file string
	)
	switch role {
	case metadata.ROOT:
		r.root.ClearSignatures()
		if err = r.sign(role); err != nil {
			return err
		}
		b, err = r.root.ToBytes(true)
		file = fmt.Sprintf("%d.root.json", r.root.Signed.Version)
	case metadata.TARGETS:
		r.targets.ClearSignatures()
		if err = r.sign(role); err != nil {
			return err
		}
		b, err = r.targets.ToBytes(true)
		file = fmt.Sprintf("%d.targets.json", r.targets.Signed.Version)
		if err == nil && len(b) > maxTargetsBytes {
			return fmt.Errorf("%w: %s targets metadata would be %d bytes; devices read at most %d: withdraw old releases",
				ErrRepo, r.name, len(b), maxTargetsBytes)
		}
	case metadata.SNAPSHOT:
		r.snapshot.ClearSignatures()
		if err = r.sign(role); err != nil {
			return err
		}
		b, err = r.snapshot.ToBytes(true)
		file = fmt.Sprintf("%d.snapshot.json", r.snapshot.Signed.Version)
	case metadata.TIMESTAMP:
		r.timestamp.ClearSignatures()
		if err = r.sign(role); err != nil {
			return err
		}
		b, err = r.timestamp.ToBytes(true)
		file = "timestamp.json"
	}
	if err != nil {
		return err
	}
	return writeAtomic(r.path(file), b)
}

// commit publishes a new targets version (when targetsChanged), then a new
// snapshot and timestamp naming it. Files are written in that order, each
// atomically, so a device reading meanwhile sees the old set or the new.
func (r *repo) commit(targetsChanged bool) error {
	t := r.now().UTC()
	if targetsChanged {
		r.targets.Signed.Version++
		r.targets.Signed.Expires = t.Add(r.expiry[metadata.TARGETS])
		if err := r.signWrite(metadata.TARGETS); err != nil {
			return err
		}
		r.snapshot.Signed.Meta["targets.json"] = metadata.MetaFile(r.targets.Signed.Version)
		r.snapshot.Signed.Version++
		r.snapshot.Signed.Expires = t.Add(r.expiry[metadata.SNAPSHOT])
		if err := r.signWrite(metadata.SNAPSHOT); err != nil {
			return err
		}
		r.timestamp.Signed.Meta["snapshot.json"] = metadata.MetaFile(r.snapshot.Signed.Version)
	}
	return r.refreshTimestamp()
}

func (r *repo) refreshTimestamp() error {
	r.timestamp.Signed.Version++
	r.timestamp.Signed.Expires = r.now().UTC().Add(r.expiry[metadata.TIMESTAMP])
	return r.signWrite(metadata.TIMESTAMP)
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// customJSON marshals a target's custom field.
func customJSON(v any) (*json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	raw := json.RawMessage(b)
	return &raw, nil
}
