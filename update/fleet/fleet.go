package fleet

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// InitOptions configure a new repository. Zero values: one key per role,
// threshold 1, the Default*Expiry durations, no director.
type InitOptions struct {
	RootKeys, RootThreshold       int
	TargetsKeys, TargetsThreshold int
	// Director also creates the director repository (Uptane), with keys
	// of its own, for per-device assignments.
	Director bool
	// Expiry durations per role; zero: the defaults.
	RootExpiry, TargetsExpiry, SnapshotExpiry, TimestampExpiry time.Duration
}

func (o InitOptions) expiry() map[string]time.Duration {
	pick := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	return map[string]time.Duration{
		metadata.ROOT:      pick(o.RootExpiry, DefaultRootExpiry),
		metadata.TARGETS:   pick(o.TargetsExpiry, DefaultTargetsExpiry),
		metadata.SNAPSHOT:  pick(o.SnapshotExpiry, DefaultSnapshotExpiry),
		metadata.TIMESTAMP: pick(o.TimestampExpiry, DefaultTimestampExpiry),
	}
}

// Repository is the fleet's release repository in one directory laid out
// for static hosting (update.Source's layout: image/, director/, chunks/).
// One Repository is not safe for concurrent use; any number of processes
// (fleet serve's leader, an operator's publish) may change one directory:
// every change takes the directory's lock and reads the metadata again
// first (see change).
type Repository struct {
	Dir      string
	image    *repo
	director *repo
	now      func() time.Time
	fence    *Epoch // Fence: changes check the repository's leader fence
}

// Init creates a repository in dir with fresh keys in keyDir (root keys in
// rootKeyDir when given: keep that one offline).
func Init(dir, keyDir, rootKeyDir string, o InitOptions, now func() time.Time) (*Repository, error) {
	if now == nil {
		now = time.Now
	}
	r := &Repository{Dir: dir, now: now}
	var err error
	if r.image, err = initRepo(dir, update.RepoImage, keyDir, rootKeyDir, o, now); err != nil {
		return nil, err
	}
	if o.Director {
		if r.director, err = initRepo(dir, update.RepoDirector, keyDir, rootKeyDir, o, now); err != nil {
			return nil, err
		}
	}
	return r, os.MkdirAll(filepath.Join(dir, "chunks"), 0o755)
}

// Open opens the repository in dir with the keys found in keyDirs.
func Open(dir string, o InitOptions, now func() time.Time, keyDirs ...string) (*Repository, error) {
	if now == nil {
		now = time.Now
	}
	keys, err := LoadKeys(keyDirs...)
	if err != nil {
		return nil, err
	}
	r := &Repository{Dir: dir, now: now}
	if r.image, err = openRepo(dir, update.RepoImage, keys, o, now); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, update.RepoDirector)); err == nil {
		if r.director, err = openRepo(dir, update.RepoDirector, keys, o, now); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// RootPath is the path of a repository's first root: what a device is
// provisioned with (it reaches later roots by the rotations each signs).
func (r *Repository) RootPath(name string) string { return filepath.Join(r.Dir, name, "1.root.json") }

// ReleaseOptions say where a release may run.
type ReleaseOptions struct {
	// Version overrides the bundle manifest's version ("": the manifest's).
	Counter   uint64 // 0: one more than the name's highest
	Boards    []string
	Providers []string
	SDK       update.SDKRange
}

// PublishStats counts what a publish stored.
type PublishStats struct {
	Files       int
	Chunks      int
	Bytes       int64 // the bundle's bytes
	NewChunks   int
	NewBytes    int64 // chunk bytes written (the rest were already there)
	TargetsVers int64 // the targets metadata version now signed
}

// Publish adds the bundle in dir as a signed release: its files cut into
// the store's chunks (written to chunks/ unless already there, so an
// unchanged layer is stored once), and a target whose custom field lists
// them. The targets, snapshot and timestamp are re-signed.
func (r *Repository) Publish(ctx context.Context, dir string, o ReleaseOptions) (*update.Release, PublishStats, error) {
	var stats PublishStats
	b, err := bundle.Load(dir)
	if err != nil {
		return nil, stats, fmt.Errorf("%w: %w", ErrBundle, err)
	}
	paths := []string{store.ManifestFile}
	for _, f := range b.Manifest.Files {
		paths = append(paths, f.Path)
	}
	slices.Sort(paths)
	rel := &update.Release{Name: b.Manifest.Name, Version: b.Manifest.Version, Counter: o.Counter,
		Boards: o.Boards, Providers: o.Providers, SDK: o.SDK, Health: b.Manifest.Health}
	starts := tensorStarts(dir, paths)
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, stats, err
		}
		f, err := r.chunkFile(filepath.Join(dir, filepath.FromSlash(p)), starts[p], &stats)
		if err != nil {
			return nil, stats, fmt.Errorf("fleet: publish %s: %w", p, err)
		}
		f.Path = p
		rel.Files = append(rel.Files, f)
		stats.Files++
		stats.Bytes += f.Size
	}
	return rel, stats, r.addRelease(rel, &stats)
}

// PublishFromStore adds a version held in a model store (a device's, or a
// build machine's) as a release, reading its chunks from the store.
func (r *Repository) PublishFromStore(ctx context.Context, st *store.Store, ref string, o ReleaseOptions) (*update.Release, PublishStats, error) {
	var stats PublishStats
	v, err := st.Resolve(ctx, ref)
	if err != nil {
		return nil, stats, err
	}
	m, err := bundle.ParseManifest(v.Manifest)
	if err != nil {
		return nil, stats, fmt.Errorf("%w: %s: %w", ErrBundle, ref, err)
	}
	rel := &update.Release{Name: v.Name, Version: v.Version, Counter: o.Counter,
		Boards: o.Boards, Providers: o.Providers, SDK: o.SDK, Health: m.Health, Files: v.Files}
	for _, f := range v.Files {
		for _, c := range f.Chunks {
			data, err := st.ReadChunk(ctx, c.SHA256)
			if err != nil {
				return nil, stats, err
			}
			if err := r.putChunk(c, data, &stats); err != nil {
				return nil, stats, err
			}
		}
		stats.Files++
		stats.Bytes += f.Size
	}
	return rel, stats, r.addRelease(rel, &stats)
}

func (r *Repository) addRelease(rel *update.Release, stats *PublishStats) error {
	return r.change(func() error { return r.addReleaseLocked(rel, stats) })
}

func (r *Repository) addReleaseLocked(rel *update.Release, stats *PublishStats) error {
	path := update.TargetPath(rel.Name, rel.Version)
	if rel.Counter == 0 {
		rel.Counter = r.highestCounter(rel.Name) + 1
		// Publishing the same version again keeps its counter: devices
		// that have it must not take it for a newer release.
		if old, ok := r.image.targets.Signed.Targets[path]; ok && old.Custom != nil {
			if prev, err := update.ParseRelease(*old.Custom); err == nil {
				rel.Counter = prev.Counter
			}
		}
	}
	if err := rel.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBundle, err)
	}
	var mf store.File
	for _, f := range rel.Files {
		if f.Path == store.ManifestFile {
			mf = f
		}
	}
	custom, err := customJSON(map[string]any{update.CustomKey: rel})
	if err != nil {
		return err
	}
	if old, ok := r.image.targets.Signed.Targets[path]; ok {
		if old.Length != mf.Size || string(old.Hashes["sha256"]) != string(mf.SHA256[:]) {
			return fmt.Errorf("%w: %s is already published with other content: publish a new version", ErrBundle, path)
		}
	}
	r.image.targets.Signed.Targets[path] = &metadata.TargetFiles{
		Length: mf.Size, Hashes: metadata.Hashes{"sha256": mf.SHA256[:]}, Custom: custom, Path: path,
	}
	if err := r.image.commit(true); err != nil {
		return err
	}
	stats.TargetsVers = r.image.targets.Signed.Version
	return nil
}

func (r *Repository) highestCounter(name string) uint64 {
	var n uint64
	for path, tf := range r.image.targets.Signed.Targets {
		if tf.Custom == nil {
			continue
		}
		if rel, err := update.ParseRelease(*tf.Custom); err == nil && rel.Name == name && rel.Counter > n {
			_ = path
			n = rel.Counter
		}
	}
	return n
}

// chunkFile cuts one file into the store's chunks (first at cuts, the
// tensor starts of an external data file: align.go), writing the new ones.
func (r *Repository) chunkFile(path string, cuts []int64, stats *PublishStats) (store.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return store.File{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return store.File{}, err
	}
	return splitAt(f, fi.Size(), cuts, func(c store.Chunk, data []byte) error { return r.putChunk(c, data, stats) })
}

func (r *Repository) putChunk(c store.Chunk, data []byte, stats *PublishStats) error {
	stats.Chunks++
	p := filepath.Join(r.Dir, filepath.FromSlash(update.ChunkPath(c.SHA256)))
	if fi, err := os.Stat(p); err == nil && fi.Size() == c.Size {
		return nil // content-addressed: the same name holds the same bytes
	}
	if sha256.Sum256(data) != c.SHA256 {
		return fmt.Errorf("%w: chunk %s does not hash to its name", ErrBundle, c.SHA256)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := writeAtomic(p, data); err != nil {
		return err
	}
	stats.NewChunks++
	stats.NewBytes += c.Size
	return nil
}

// Releases lists the signed releases, by target path.
func (r *Repository) Releases() map[string]*update.Release {
	out := map[string]*update.Release{}
	for path, tf := range r.image.targets.Signed.Targets {
		if tf.Custom != nil {
			if rel, err := update.ParseRelease(*tf.Custom); err == nil {
				out[path] = rel
			}
		}
	}
	return out
}

// Withdraw removes the release name@version from the signed targets (its
// chunks stay: other releases may share them). Devices that installed it
// keep it; their counter keeps them from going back to older releases.
func (r *Repository) Withdraw(name, version string) error {
	return r.change(func() error {
		path := update.TargetPath(name, version)
		if _, ok := r.image.targets.Signed.Targets[path]; !ok {
			return fmt.Errorf("%w: %s", ErrTarget, path)
		}
		delete(r.image.targets.Signed.Targets, path)
		return r.image.commit(true)
	})
}

// Assign makes the director assign the release name@version to devices
// (none: every device). It copies the image repository's length and hashes
// for the target: the director can only point at what the release keys
// signed.
func (r *Repository) Assign(name, version string, devices []string) error {
	if r.director == nil {
		return fmt.Errorf("%w: no director repository (keygen --director)", ErrRepo)
	}
	custom, err := customJSON(update.Assignment{Devices: devices})
	if err != nil {
		return err
	}
	return r.change(func() error {
		path := update.TargetPath(name, version)
		img, ok := r.image.targets.Signed.Targets[path]
		if !ok {
			return fmt.Errorf("%w: %s", ErrTarget, path)
		}
		// One assignment per model name: the newest replaces the others.
		// Named devices get it in their own chains; every device, in the
		// shared chain.
		if len(devices) > 0 {
			_, _, err := r.setAssignmentsLocked(name, map[string][]string{version: devices})
			return err
		}
		if _, err := r.setDeviceAssignments(name, nil); err != nil {
			return err
		}
		for p := range r.director.targets.Signed.Targets {
			if len(p) > len(name) && p[:len(name)+1] == name+"/" {
				delete(r.director.targets.Signed.Targets, p)
			}
		}
		r.director.targets.Signed.Targets[path] = &metadata.TargetFiles{Length: img.Length, Hashes: img.Hashes, Custom: custom, Path: path}
		return r.director.commit(true)
	})
}

// AssignUnsigned writes a director assignment for a target the image
// repository never signed: what a compromised director would do. It exists
// so tests and drills can show every device refuses it.
func (r *Repository) AssignUnsigned(path string, length int64, sha []byte) error {
	if r.director == nil {
		return fmt.Errorf("%w: no director repository", ErrRepo)
	}
	return r.change(func() error {
		r.director.targets.Signed.Targets[path] = &metadata.TargetFiles{Length: length, Hashes: metadata.Hashes{"sha256": sha}, Path: path}
		return r.director.commit(true)
	})
}

// RefreshTimestamp re-signs the timestamp of the named repository (image
// or director) with a fresh expiry: the online job that keeps devices
// from mistaking a live repository for a frozen one. It needs only the
// timestamp key, but for the director's device chains near expiry
// (refreshDeviceChains), whose snapshot and targets are signed again with
// the director's online keys.
func (r *Repository) RefreshTimestamp(name string) error {
	rp, err := r.repo(name)
	if err != nil {
		return err
	}
	return r.change(func() error {
		if err := rp.refreshTimestamp(); err != nil {
			return err
		}
		if rp == r.director {
			_, err := r.refreshDeviceChains()
			return err
		}
		return nil
	})
}

// RotateOptions change a root: new keys for Roles (the old ones revoked),
// new thresholds.
type RotateOptions struct {
	Repo  string   // image or director
	Roles []string // roles whose keys are replaced
	Keys  int      // keys per replaced role; 0: 1
	// Threshold for the replaced roles; 0: 1.
	Threshold int
	KeyDir    string // where the new keys go
}

// RotateRoot writes root version N+1, signed by the keys of root N (its
// threshold) and of N+1 (theirs), so devices holding N accept it. Roles
// whose keys changed are re-signed with the new keys.
func (r *Repository) RotateRoot(o RotateOptions) error {
	rp, err := r.repo(o.Repo)
	if err != nil {
		return err
	}
	return r.change(func() error { return r.rotateLocked(rp, o) })
}

func (r *Repository) rotateLocked(rp *repo, o RotateOptions) error {
	oldRoot := rp.root.Signed.Roles[metadata.ROOT]
	var oldSigners []*Key
	for _, id := range oldRoot.KeyIDs {
		if k, ok := rp.keys[id]; ok {
			oldSigners = append(oldSigners, k)
		}
	}
	if len(oldSigners) < oldRoot.Threshold {
		return fmt.Errorf("%w: rotating %s root needs %d of the current root keys, %d at hand", ErrKeys, o.Repo, oldRoot.Threshold, len(oldSigners))
	}
	rp.root.Signed.Version++
	rp.root.Signed.Expires = r.now().UTC().Add(rp.expiry[metadata.ROOT])
	for _, role := range o.Roles {
		rr, ok := rp.root.Signed.Roles[role]
		if !ok {
			return fmt.Errorf("%w: unknown role %q", ErrRepo, role)
		}
		for _, id := range slices.Clone(rr.KeyIDs) {
			if err := rp.root.Signed.RevokeKey(id, role); err != nil {
				return err
			}
		}
		for range max(o.Keys, 1) {
			k, err := GenerateKey(o.KeyDir, o.Repo, role)
			if err != nil {
				return err
			}
			rp.keys[k.ID] = k
			if err := rp.root.Signed.AddKey(k.PublicKey(), role); err != nil {
				return err
			}
		}
		rr.Threshold = max(o.Threshold, 1)
	}
	// Signed by the new root keys (sign) and the old ones.
	rp.root.ClearSignatures()
	if err := rp.sign(metadata.ROOT); err != nil {
		return err
	}
	newIDs := rp.root.Signed.Roles[metadata.ROOT].KeyIDs
	for _, k := range oldSigners {
		if !slices.Contains(newIDs, k.ID) {
			if _, err := rp.root.Sign(k.Signer()); err != nil {
				return err
			}
		}
	}
	b, err := rp.root.ToBytes(true)
	if err != nil {
		return err
	}
	if err := writeAtomic(rp.path(fmt.Sprintf("%d.root.json", rp.root.Signed.Version)), b); err != nil {
		return err
	}
	// Whatever the rotation touched is signed again by the keys now valid.
	return rp.commit(true)
}

// change runs fn, which changes metadata, holding the directory's lock
// and after reading every role again from disk. fleet serve's leader
// (assignments, timestamps) and an operator's publish are separate
// processes changing one directory: without the lock and the fresh read,
// one re-signed what it had read before the other wrote — a timestamp
// naming the snapshot from before a publish hid the new release from
// devices, which then refused its assignment (TestChangesDoNotLoseEachOther).
func (r *Repository) change(fn func() error) error {
	unlock, err := lockDir(r.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := r.checkFence(); err != nil {
		return err
	}
	for _, rp := range []*repo{r.image, r.director} {
		if rp == nil {
			continue
		}
		if err := rp.load(); err != nil {
			return err
		}
	}
	return fn()
}

func (r *Repository) repo(name string) (*repo, error) {
	switch {
	case name == update.RepoImage || name == "":
		return r.image, nil
	case name == update.RepoDirector && r.director != nil:
		return r.director, nil
	}
	return nil, fmt.Errorf("%w: no %q repository", ErrRepo, name)
}

// ChunkBytes sums the sizes of the files under chunks/ (what the
// repository stores for all releases together).
func (r *Repository) ChunkBytes() (int64, error) {
	var n int64
	err := filepath.WalkDir(filepath.Join(r.Dir, "chunks"), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}
