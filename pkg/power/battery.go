package power

import (
	"io/fs"
	"path"
)

// probeBattery reads /sys/class/power_supply. A battery's power_now (µW)
// is the system's power only while it is Discharging; a charging or full
// battery measures the charger, so it is unavailable then.
func probeBattery(fsys fs.FS, p *Probed) {
	const dir = "sys/class/power_supply"
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		p.unavailable("battery", "/"+dir, reasonFor(err))
		return
	}
	found := false
	for _, e := range ents {
		bdir := path.Join(dir, e.Name())
		if typ, _ := readString(fsys, path.Join(bdir, "type")); typ != "Battery" {
			continue
		}
		found = true
		src := "battery " + e.Name()
		status, err := readString(fsys, path.Join(bdir, "status"))
		if err != nil {
			p.unavailable(src, "/"+bdir+"/status", reasonFor(err))
			continue
		}
		var t *term
		if _, err := fs.Stat(fsys, path.Join(bdir, "power_now")); err == nil {
			t = &term{name: "power_now", power: newValueFile(fsys, path.Join(bdir, "power_now")), scale: 1e-6}
		} else if _, err := fs.Stat(fsys, path.Join(bdir, "current_now")); err == nil {
			t = &term{name: "voltage_now×current_now", volt: newValueFile(fsys, path.Join(bdir, "voltage_now")),
				curr: newValueFile(fsys, path.Join(bdir, "current_now")), scale: 1e-12} // µV×µA
		} else {
			p.unavailable(src, "/"+bdir, "no power_now or current_now")
			continue
		}
		if status != "Discharging" {
			t.close()
			p.unavailable(src, "/"+bdir+"/status", "status "+status+": power_now is system power only while Discharging")
			continue
		}
		s := newPowerSource(Info{Name: src, Scope: ScopeBoardInput}, []*term{t})
		s.guard, s.guardWant = newValueFile(fsys, path.Join(bdir, "status")), "Discharging"
		p.Sources = append(p.Sources, s)
	}
	if !found {
		p.unavailable("battery", "/"+dir, "no battery")
	}
}
