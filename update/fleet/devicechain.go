package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// Assignments that name devices live in each device's own director chain
// (update.DeviceMetaPrefix: timestamp, snapshot and targets signed by the
// director's keys under its shared root), as Uptane's director signs per
// device: what a device downloads for its assignment is then its own few
// targets, whatever the size of the fleet (TestDeviceChainFlat measures
// it at 1,000 and 100,000 devices). The director's shared chain keeps
// only fleet-wide assignments.
//
// Which device is assigned what is kept fleet-side in state/assignments.json
// (the index: model -> version -> devices, each list sorted), outside the
// trees a static host serves (image/, director/, chunks/). Chains are
// written before the index: a crash between the two leaves the index
// behind, and the next change rewrites those chains again (their versions
// only grow). Lists by version, not versions by device: the leader reads
// and writes the index at every wave, and at 100,000 devices a map of
// every device (and its list) was most of fleet serve's peak memory
// (TestIndexMemory).

// assignIndex is model -> version -> the devices assigned it (sorted,
// without repeats).
type assignIndex map[string]map[string][]string

// indexSchema marks the index's format; the first format, without one,
// was model -> device -> versions, and is read and rewritten.
const indexSchema = "edgeinfer.assignments/2"

type indexFile struct {
	Schema string      `json:"schema"`
	Models assignIndex `json:"models"`
}

func (r *Repository) indexPath() string { return filepath.Join(r.Dir, "state", "assignments.json") }

// readIndex reads the index (empty when there is none).
func (r *Repository) readIndex() (assignIndex, error) {
	b, err := os.ReadFile(r.indexPath())
	if errors.Is(err, fs.ErrNotExist) {
		return assignIndex{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: assignment index: %v", ErrRepo, err)
	}
	bad := func(err error) error {
		return fmt.Errorf("%w: assignment index %s: %v (rewrite it by setting the assignments again)", ErrRepo, r.indexPath(), err)
	}
	var f indexFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, bad(err)
	}
	switch {
	case f.Schema == indexSchema:
		if f.Models == nil {
			f.Models = assignIndex{}
		}
		return f.Models, nil
	case f.Schema != "":
		return nil, bad(fmt.Errorf("schema %q, want %q", f.Schema, indexSchema))
	}
	var first map[string]map[string][]string // model -> device -> versions
	if err := json.Unmarshal(b, &first); err != nil {
		return nil, bad(err)
	}
	idx := assignIndex{}
	for m, byDevice := range first {
		idx[m] = map[string][]string{}
		for d, vs := range byDevice {
			for _, v := range vs {
				idx[m][v] = append(idx[m][v], d)
			}
		}
		for v, ds := range idx[m] {
			slices.Sort(ds)
			idx[m][v] = slices.Compact(ds)
		}
	}
	return idx, nil
}

func (r *Repository) writeIndex(idx assignIndex) error {
	if err := os.MkdirAll(filepath.Dir(r.indexPath()), 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(indexFile{Schema: indexSchema, Models: idx})
	if err != nil {
		return err
	}
	return writeAtomic(r.indexPath(), b)
}

// setDeviceAssignments makes model's per-device assignments exactly
// byVersion (each list sorted, without repeats) and rewrites the chains
// of the devices whose assignments changed. It returns those devices,
// sorted.
func (r *Repository) setDeviceAssignments(model string, byVersion map[string][]string) ([]string, error) {
	idx, err := r.readIndex()
	if err != nil {
		return nil, err
	}
	old := idx[model]
	var changed []string
	for v := range joinKeys(old, byVersion) {
		changed = appendDifference(changed, old[v], byVersion[v])
	}
	if len(changed) == 0 {
		return nil, nil
	}
	slices.Sort(changed)
	changed = slices.Compact(changed) // moved from one version to another
	if len(byVersion) == 0 {
		delete(idx, model)
	} else {
		idx[model] = byVersion
	}
	if err := r.eachDevice(changed, func(d string) error { return r.writeDeviceChain(d, targetsOf(idx, d)) }); err != nil {
		return nil, err
	}
	syscall.Sync() // the chains are durable before the index says they are written
	return changed, r.writeIndex(idx)
}

// joinKeys is the union of a's and b's keys.
func joinKeys(a, b map[string][]string) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// appendDifference appends what is in one of the sorted lists a and b
// and not in the other.
func appendDifference(out, a, b []string) []string {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default:
			i, j = i+1, j+1
		}
	}
	return out
}

// eachDevice runs f for every device on a few goroutines: a chain's
// cost is mostly the file system's (open, rename, mkdir: about 2 ms a
// device one at a time, TestDeviceChainFlat), which overlaps. The first
// error stops the others from starting new devices.
func (r *Repository) eachDevice(devices []string, f func(string) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs error
		next atomic.Int64
	)
	for range min(16, len(devices)) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				mu.Lock()
				stop := errs != nil
				mu.Unlock()
				if stop || i >= int64(len(devices)) {
					return
				}
				if err := f(devices[i]); err != nil {
					mu.Lock()
					errs = errors.Join(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// targetsOf lists device's assigned target paths across models.
func targetsOf(idx assignIndex, device string) []string {
	var out []string
	for _, m := range slices.Sorted(maps.Keys(idx)) {
		for _, v := range slices.Sorted(maps.Keys(idx[m])) {
			if _, ok := slices.BinarySearch(idx[m][v], device); ok {
				out = append(out, update.TargetPath(m, v))
			}
		}
	}
	return out
}

func (r *Repository) deviceDir(device string) string {
	return filepath.Join(r.Dir, filepath.FromSlash(update.DeviceMetaPrefix(device)))
}

// writeDeviceChain signs and writes a new version of device's chain whose
// targets are paths (copied from the image repository: the director
// points at what the release keys signed, never at anything else). Each
// file is written by rename, targets first and the timestamp last, so a
// device reading meanwhile sees the old chain or the new; the version
// before stays for a device that read the old timestamp.
func (r *Repository) writeDeviceChain(device string, paths []string) error {
	if err := update.ValidDeviceID(device); err != nil {
		return fmt.Errorf("%w: %w", ErrTarget, err)
	}
	dir := r.deviceDir(device)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var v, tsv int64 // the chain's snapshot and targets versions go together
	if ts, err := metadata.Timestamp().FromFile(filepath.Join(dir, "timestamp.json")); err == nil {
		v, tsv = ts.Signed.Meta["snapshot.json"].Version, ts.Signed.Version
	}
	v, tsv = v+1, tsv+1
	t := r.now().UTC().Truncate(time.Second)            // expiries in whole seconds, as TUF writes them
	long := t.Add(r.director.expiry[metadata.SNAPSHOT]) // targets and snapshot renew together
	targets := metadata.Targets(long)
	targets.Signed.Version = v
	custom, err := customJSON(update.Assignment{Devices: []string{device}})
	if err != nil {
		return err
	}
	for _, p := range paths {
		img, ok := r.image.targets.Signed.Targets[p]
		if !ok {
			// Withdrawn since it was assigned (SetAssignments checks new
			// ones): no device could install it, and the chain still
			// carries the device's other assignments.
			continue
		}
		targets.Signed.Targets[p] = &metadata.TargetFiles{Length: img.Length, Hashes: img.Hashes, Custom: custom, Path: p}
	}
	snap := metadata.Snapshot(long)
	snap.Signed.Version = v
	snap.Signed.Meta["targets.json"] = metadata.MetaFile(v)
	if err := writeDeviceRole(r.director, dir, fmt.Sprintf("%d.targets.json", v), metadata.TARGETS, targets); err != nil {
		return err
	}
	if err := writeDeviceRole(r.director, dir, fmt.Sprintf("%d.snapshot.json", v), metadata.SNAPSHOT, snap); err != nil {
		return err
	}
	if err := r.writeDeviceTimestamp(dir, tsv, v, t); err != nil {
		return err
	}
	for _, role := range []string{"targets", "snapshot"} {
		_ = os.Remove(filepath.Join(dir, fmt.Sprintf("%d.%s.json", v-2, role)))
	}
	return nil
}

func (r *Repository) writeDeviceTimestamp(dir string, version, snapshot int64, t time.Time) error {
	ts := metadata.Timestamp(t.Add(r.director.expiry[metadata.TIMESTAMP]))
	ts.Signed.Version = version
	ts.Signed.Meta["snapshot.json"] = metadata.MetaFile(snapshot)
	return writeDeviceRole(r.director, dir, "timestamp.json", metadata.TIMESTAMP, ts)
}

// writeDeviceRole signs md as the director's role and writes it to
// dir/file by rename, without a sync of its own (setDeviceAssignments
// syncs once for all the chains it wrote: one fsync per file made a
// wave of thousands of devices wait on the disk).
func writeDeviceRole[T metadata.Roles](r *repo, dir, file, role string, md *metadata.Metadata[T]) error {
	if err := signRole(r, role, md); err != nil {
		return err
	}
	b, err := md.ToBytes(false) // compact: a device downloads it at every change
	if err != nil {
		return err
	}
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// refreshDeviceChains keeps every device chain from expiring: a timestamp
// within half its period of expiry is signed again, and a chain whose
// snapshot (and targets, which expire with it) is, is written again with
// the same targets. A fleet of N devices costs about 2N timestamp
// signatures a day at the default expiry, whatever changes.
func (r *Repository) refreshDeviceChains() (int, error) {
	root := filepath.Join(r.Dir, update.RepoDirector, "devices")
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	now := r.now().UTC()
	soon := func(exp time.Time, period time.Duration) bool { return exp.Sub(now) < period/2 }
	n := 0
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		ts, err := metadata.Timestamp().FromFile(filepath.Join(dir, "timestamp.json"))
		if err != nil {
			return n, fmt.Errorf("%w: device chain %s: %v", ErrRepo, e.Name(), err)
		}
		v := ts.Signed.Meta["snapshot.json"].Version
		snap, err := metadata.Snapshot().FromFile(filepath.Join(dir, fmt.Sprintf("%d.snapshot.json", v)))
		if err != nil {
			return n, fmt.Errorf("%w: device chain %s: %v", ErrRepo, e.Name(), err)
		}
		switch {
		case soon(snap.Signed.Expires, r.director.expiry[metadata.SNAPSHOT]):
			tg, err := metadata.Targets().FromFile(filepath.Join(dir, fmt.Sprintf("%d.targets.json", v)))
			if err != nil {
				return n, fmt.Errorf("%w: device chain %s: %v", ErrRepo, e.Name(), err)
			}
			err = r.writeDeviceChain(e.Name(), slices.Sorted(maps.Keys(tg.Signed.Targets)))
			if err != nil {
				return n, err
			}
		case soon(ts.Signed.Expires, r.director.expiry[metadata.TIMESTAMP]):
			if err := r.writeDeviceTimestamp(dir, ts.Signed.Version+1, v, now); err != nil {
				return n, err
			}
		default:
			continue
		}
		n++
	}
	if n > 0 {
		syscall.Sync()
	}
	return n, nil
}
