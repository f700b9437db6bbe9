package power

import (
	"errors"
	"io/fs"
	"path"
	"regexp"
	"strings"
)

// topZone matches top-level RAPL zones only. Subzones (intel-rapl:0:0 =
// core, :1 = uncore) are inside their package's count and are never added.
var topZone = regexp.MustCompile(`^(intel|amd)-rapl:\d+$`)

const raplRootOnly = "energy_uj is root-only since Linux 5.10 (PLATYPUS, CVE-2020-8694): run as root or grant read access"

func probeRAPL(fsys fs.FS, p *Probed) {
	const dir = "sys/class/powercap"
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		p.unavailable("rapl", "/"+dir, reasonFor(err)+" (no powercap driver)")
		return
	}
	var pkgs []*zone
	var pkgNames []string
	found := false
	for _, e := range ents {
		if !topZone.MatchString(e.Name()) {
			continue
		}
		found = true
		zdir := path.Join(dir, e.Name())
		name, err := readString(fsys, path.Join(zdir, "name"))
		if err != nil {
			p.unavailable("rapl "+e.Name(), "/"+zdir+"/name", reasonFor(err))
			continue
		}
		efile := path.Join(zdir, "energy_uj")
		if _, err := readInt(fsys, efile); err != nil {
			reason := reasonFor(err)
			if errors.Is(err, fs.ErrPermission) {
				reason = raplRootOnly
			}
			p.unavailable("rapl "+name, "/"+efile, reason)
			continue
		}
		maxRange, err := readInt(fsys, path.Join(zdir, "max_energy_range_uj"))
		if err != nil || maxRange <= 0 {
			maxRange = 0 // backwards steps then count as gaps, never as wraps
		}
		z := &zone{file: newValueFile(fsys, efile), c: counter{maxRange: uint64(maxRange)}}
		switch {
		case strings.HasPrefix(name, "package-"):
			pkgs = append(pkgs, z)
			pkgNames = append(pkgNames, name)
		case name == "psys":
			p.Sources = append(p.Sources, newCounterSource(Info{Name: "rapl psys", Scope: ScopeModule}, []*zone{z}))
		default:
			p.Sources = append(p.Sources, newCounterSource(Info{Name: "rapl " + name, Scope: ScopeRail}, []*zone{z}))
		}
	}
	if len(pkgs) > 0 {
		p.Sources = append(p.Sources, newCounterSource(
			Info{Name: "rapl " + strings.Join(pkgNames, "+"), Scope: ScopeCPUPackage}, pkgs))
	}
	if !found {
		p.unavailable("rapl", "/"+dir, "no top-level intel-rapl/amd-rapl zone")
	}
}
