package power

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
)

var hwmonChan = regexp.MustCompile(`^(power|energy|in|curr)(\d+)_(input|average|label)$`)

// hwmonScope maps hwmon driver names to scopes; unknown drivers are rails.
var hwmonScope = map[string]Scope{
	"amdgpu": ScopeGPU, "radeon": ScopeGPU, "nouveau": ScopeGPU, "i915": ScopeGPU, "xe": ScopeGPU,
	"amd_energy": ScopeCPUPackage, "zenpower": ScopeCPUPackage, "zenergy": ScopeCPUPackage,
}

// probeHwmon reads /sys/class/hwmon. Devices are identified by their name
// file and channel labels: hwmonN numbers change across boots. The Jetson
// INA3221 is left to its own prober.
func probeHwmon(fsys fs.FS, p *Probed) {
	const dir = "sys/class/hwmon"
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		p.unavailable("hwmon", "/"+dir, reasonFor(err))
		return
	}
	var seen []string
	n := len(p.Sources)
	for _, e := range ents {
		hdir := path.Join(dir, e.Name())
		name, err := readString(fsys, path.Join(hdir, "name"))
		if err != nil {
			continue
		}
		if name == "ina3221" {
			seen = append(seen, "ina3221 (read as jetson-ina3221)")
			continue
		}
		seen = append(seen, name)
		p.Sources = append(p.Sources, hwmonSources(fsys, hdir, name, hwmonScope[name])...)
	}
	if len(p.Sources) == n {
		reason := "no hwmon device"
		if len(seen) > 0 {
			slices.Sort(seen)
			reason = "no power, energy or voltage×current channel in hwmon devices: " + strings.Join(seen, ", ")
		}
		p.unavailable("hwmon", "/"+dir, reason)
	}
}

// hwmonSources builds the sources of one hwmon directory.
func hwmonSources(fsys fs.FS, hdir, name string, scope Scope) []Source {
	if scope == "" {
		scope = ScopeRail
	}
	ents, err := fs.ReadDir(fsys, hdir)
	if err != nil {
		return nil
	}
	files := map[string]bool{}
	for _, e := range ents {
		files[e.Name()] = true
	}
	label := func(kind, idx string) string {
		if l, err := readString(fsys, path.Join(hdir, kind+idx+"_label")); err == nil && l != "" {
			return l
		}
		return kind + idx
	}
	var out []Source
	powered := map[string]bool{} // labels that already have a power channel
	var chans []string
	for f := range files {
		chans = append(chans, f)
	}
	slices.Sort(chans)
	for _, f := range chans {
		m := hwmonChan.FindStringSubmatch(f)
		if m == nil {
			continue
		}
		kind, idx, attr := m[1], m[2], m[3]
		switch {
		case kind == "energy" && attr == "input":
			l := label(kind, idx)
			if strings.HasPrefix(l, "Ecore") {
				continue // amd_energy per-core counters are inside the socket's
			}
			z := &zone{file: newValueFile(fsys, path.Join(hdir, f))}
			out = append(out, newCounterSource(Info{Name: fmt.Sprintf("hwmon %s %s", name, l), Scope: scope}, []*zone{z}))
			powered[l] = true
		case kind == "power" && (attr == "input" || attr == "average" && !files["power"+idx+"_input"]):
			l := label(kind, idx)
			t := &term{name: l, power: newValueFile(fsys, path.Join(hdir, f)), scale: 1e-6} // µW
			out = append(out, newPowerSource(Info{Name: fmt.Sprintf("hwmon %s %s", name, l), Scope: scope}, []*term{t}))
			powered[l] = true
		}
	}
	// Voltage × current pairs, matched by label (or by index without labels).
	for _, f := range chans {
		m := hwmonChan.FindStringSubmatch(f)
		if m == nil || m[1] != "curr" || m[3] != "input" {
			continue
		}
		cl := label("curr", m[2])
		if powered[cl] {
			continue
		}
		vin := ""
		for _, g := range chans {
			mm := hwmonChan.FindStringSubmatch(g)
			if mm != nil && mm[1] == "in" && mm[3] == "input" && (label("in", mm[2]) == cl || cl == "curr"+m[2] && mm[2] == m[2]) {
				vin = g
				break
			}
		}
		if vin == "" {
			continue
		}
		t := &term{name: cl, volt: newValueFile(fsys, path.Join(hdir, vin)), curr: newValueFile(fsys, path.Join(hdir, f)), scale: 1e-6} // mV×mA
		out = append(out, newPowerSource(Info{Name: fmt.Sprintf("hwmon %s %s", name, cl), Scope: scope}, []*term{t}))
	}
	return out
}
