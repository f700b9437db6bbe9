package fleet

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// SetAssignments makes the director's assignments of model exactly
// byVersion: version -> the devices it is assigned to (a device named
// under two versions installs the one with the higher counter). Other
// models' assignments are kept. Every version must be signed by the image
// repository, whose length and hashes the director copies: the director
// can point devices at a signed release, never at anything else. Each
// device's assignments are signed in its own chain (devicechain.go), and
// only the chains of devices whose assignments changed are written; a
// fleet-wide assignment of model in the shared chain is replaced.
func (r *Repository) SetAssignments(model string, byVersion map[string][]string) (changed bool, err error) {
	_, changed, err = r.assign(model, byVersion)
	return changed, err
}

// assign is SetAssignments that also returns the devices whose own
// assignments changed and that are still assigned something: those the
// leader sends the check command (without reading the assignments before
// and after, which cost it ~100 bytes a device of the fleet each change).
func (r *Repository) assign(model string, byVersion map[string][]string) (gained []string, changed bool, err error) {
	if r.director == nil {
		return nil, false, fmt.Errorf("%w: no director repository (keygen --director)", ErrRepo)
	}
	err = r.change(func() (err error) {
		gained, changed, err = r.setAssignmentsLocked(model, byVersion)
		return err
	})
	return gained, changed, err
}

func (r *Repository) setAssignmentsLocked(model string, byVersion map[string][]string) (gained []string, changed bool, err error) {
	lists := map[string][]string{}
	for version, devices := range byVersion {
		if len(devices) == 0 {
			continue
		}
		path := update.TargetPath(model, version)
		if _, ok := r.image.targets.Signed.Targets[path]; !ok {
			return nil, false, fmt.Errorf("%w: %s (the director can only assign what the release keys signed)", ErrTarget, path)
		}
		for _, d := range devices {
			if err := update.ValidDeviceID(d); err != nil {
				return nil, false, fmt.Errorf("%w: %w", ErrTarget, err)
			}
		}
		lists[version] = sortedSet(devices)
	}
	devs, err := r.setDeviceAssignments(model, lists)
	if err != nil {
		return nil, false, err
	}
	for _, d := range devs {
		for _, ds := range lists {
			if _, ok := slices.BinarySearch(ds, d); ok {
				gained = append(gained, d)
				break
			}
		}
	}
	shared, err := r.clearShared(model)
	if err != nil || shared || len(devs) == 0 {
		return gained, len(devs) > 0 || shared, err
	}
	// The shared chain's timestamp is signed with every change, as when
	// it held every assignment: a device reads it beside its own, and
	// one whose clock floor sits at the image timestamp's expiry (a
	// clock that jumped ahead and came back) must not find it older
	// (update/month: a device refused every later release as frozen).
	return gained, true, r.director.refreshTimestamp()
}

// clearShared removes model's assignments from the director's shared
// chain (fleet-wide ones, and device lists an older fleet wrote there).
func (r *Repository) clearShared(model string) (bool, error) {
	targets := r.director.targets.Signed.Targets
	n := len(targets)
	maps.DeleteFunc(targets, func(p string, _ *metadata.TargetFiles) bool { return strings.HasPrefix(p, model+"/") })
	if len(targets) == n {
		return false, nil
	}
	return true, r.director.commit(true)
}

// Assignments returns the director's assignments of model: version ->
// devices, as signed now (nil devices: every device).
func (r *Repository) Assignments(model string) map[string][]string {
	out := map[string][]string{}
	if r.director == nil {
		return out
	}
	for p, tf := range r.director.targets.Signed.Targets {
		if !strings.HasPrefix(p, model+"/") {
			continue
		}
		out[strings.TrimPrefix(p, model+"/")] = devicesOf(tf)
	}
	idx, err := r.readIndex()
	if err != nil {
		return out
	}
	for v, ds := range idx[model] {
		out[v] = append(out[v], ds...)
	}
	for _, ds := range out {
		slices.Sort(ds)
	}
	return out
}

func devicesOf(tf *metadata.TargetFiles) []string {
	var a update.Assignment
	if tf.Custom != nil {
		_ = json.Unmarshal(*tf.Custom, &a)
	}
	return a.Devices
}

// sortedSet is ds sorted without repeats: ds itself when it is so already
// (Assignments' lists are: no copy of 100,000 names then), else a copy.
func sortedSet(ds []string) []string {
	for i := 1; i < len(ds); i++ {
		if ds[i-1] >= ds[i] {
			return slices.Compact(slices.Sorted(slices.Values(ds)))
		}
	}
	return ds
}
