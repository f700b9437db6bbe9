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

// SetAssignments makes the director's targets for model exactly
// byVersion: version -> the devices it is assigned to (a device named
// under two versions installs the one with the higher counter). Other
// models' assignments are kept. Every version must be signed by the image
// repository, whose length and hashes the director copies: the director
// can point devices at a signed release, never at anything else. Nothing
// is re-signed when the assignments are already those.
func (r *Repository) SetAssignments(model string, byVersion map[string][]string) (changed bool, err error) {
	if r.director == nil {
		return false, fmt.Errorf("%w: no director repository (keygen --director)", ErrRepo)
	}
	err = r.change(func() (err error) {
		changed, err = r.setAssignmentsLocked(model, byVersion)
		return err
	})
	return changed, err
}

func (r *Repository) setAssignmentsLocked(model string, byVersion map[string][]string) (changed bool, err error) {
	want := map[string]*metadata.TargetFiles{}
	for version, devices := range byVersion {
		if len(devices) == 0 {
			continue
		}
		path := update.TargetPath(model, version)
		img, ok := r.image.targets.Signed.Targets[path]
		if !ok {
			return false, fmt.Errorf("%w: %s (the director can only assign what the release keys signed)", ErrTarget, path)
		}
		ds := slices.Clone(devices)
		slices.Sort(ds)
		ds = slices.Compact(ds)
		custom, err := customJSON(update.Assignment{Devices: ds})
		if err != nil {
			return false, err
		}
		want[path] = &metadata.TargetFiles{Length: img.Length, Hashes: img.Hashes, Custom: custom, Path: path}
	}
	targets := r.director.targets.Signed.Targets
	have := map[string]*metadata.TargetFiles{}
	for p, tf := range targets {
		if strings.HasPrefix(p, model+"/") {
			have[p] = tf
		}
	}
	if sameAssignments(have, want) {
		return false, nil
	}
	for p := range have {
		delete(targets, p)
	}
	maps.Copy(targets, want)
	return true, r.director.commit(true)
}

// Assignments returns the director's assignments of model: version ->
// devices, as signed now.
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
	return out
}

// sameAssignments compares targets by length, hashes and assigned
// devices (the custom field as read back from disk is canonical JSON, so
// its bytes are not compared).
func sameAssignments(a, b map[string]*metadata.TargetFiles) bool {
	if len(a) != len(b) {
		return false
	}
	for p, x := range a {
		y, ok := b[p]
		if !ok || !x.Equal(*y) || !slices.Equal(devicesOf(x), devicesOf(y)) {
			return false
		}
	}
	return true
}

func devicesOf(tf *metadata.TargetFiles) []string {
	var a update.Assignment
	if tf.Custom != nil {
		_ = json.Unmarshal(*tf.Custom, &a)
	}
	return a.Devices
}
