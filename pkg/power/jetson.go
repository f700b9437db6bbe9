package power

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// rail is one named supply rail with its power term.
type rail struct {
	name string
	t    *term
}

// isInputRail reports whether a rail is the board's input: VDD_IN on
// Orin Nano/NX, Xavier and TX2, POM_5V_IN on the Jetson Nano.
func isInputRail(name string) bool {
	return name == "VDD_IN" || strings.HasSuffix(name, "_IN")
}

// railSources makes the sources of a set of rails: the input rail as
// board_input when present, otherwise the sum of the rails as a partial
// module figure naming its rails; and every other rail on its own.
func railSources(driver string, rails []rail) []Source {
	var out []Source
	var others []*term
	var names []string
	hasInput := false
	for _, r := range rails {
		scope := ScopeRail
		if isInputRail(r.name) {
			scope, hasInput = ScopeBoardInput, true
		} else {
			names = append(names, r.name)
			// The summed module source keeps its own open files.
			others = append(others, r.t.clone())
		}
		out = append(out, newPowerSource(Info{Name: driver + " " + r.name, Scope: scope}, []*term{r.t}))
	}
	if !hasInput && len(others) > 0 {
		name := fmt.Sprintf("%s module (partial: rails %s)", driver, strings.Join(names, ", "))
		out = append(out, newPowerSource(Info{Name: name, Scope: ScopeModule, Partial: true}, others))
	}
	return out
}

func (t *term) clone() *term {
	c := &term{name: t.name, scale: t.scale}
	for _, p := range []struct {
		dst **valueFile
		src *valueFile
	}{{&c.power, t.power}, {&c.volt, t.volt}, {&c.curr, t.curr}} {
		if p.src != nil {
			*p.dst = newValueFile(p.src.fsys, p.src.path)
		}
	}
	return c
}

// probeINA3221 reads the mainline ina3221 hwmon driver of JetPack 5/6:
// inK_label names the rail, inK_input is mV and currK_input mA.
func probeINA3221(fsys fs.FS, p *Probed) {
	const drv = "sys/bus/i2c/drivers/ina3221"
	dirs, _ := fs.Glob(fsys, drv+"/*/hwmon/hwmon*")
	var rails []rail
	for _, d := range dirs {
		for k := 1; k <= 8; k++ {
			ks := strconv.Itoa(k)
			l, err := readString(fsys, path.Join(d, "in"+ks+"_label"))
			if err != nil || l == "" {
				continue
			}
			in, curr := path.Join(d, "in"+ks+"_input"), path.Join(d, "curr"+ks+"_input")
			if _, err := fs.Stat(fsys, curr); err != nil {
				continue // a label without a shunt (sum channels) is not a rail
			}
			rails = append(rails, rail{l, &term{name: l, volt: newValueFile(fsys, in), curr: newValueFile(fsys, curr), scale: 1e-6}})
		}
	}
	if len(rails) == 0 {
		p.unavailable("jetson-ina3221", "/"+drv, "not present (no ina3221 hwmon rails)")
		return
	}
	slices.SortStableFunc(rails, func(a, b rail) int { return strings.Compare(a.name, b.name) })
	p.Sources = append(p.Sources, railSources("jetson-ina3221", rails)...)
}

// probeINA3221x reads the JetPack ≤ 4 ina3221x iio driver: rail_nameK and
// in_powerK_input in mW.
func probeINA3221x(fsys fs.FS, p *Probed) {
	const drv = "sys/bus/i2c/drivers/ina3221x"
	dirs, _ := fs.Glob(fsys, drv+"/*/iio:device*")
	var rails []rail
	for _, d := range dirs {
		for k := range 8 {
			ks := strconv.Itoa(k)
			l, err := readString(fsys, path.Join(d, "rail_name_"+ks))
			if err != nil || l == "" {
				continue
			}
			pw := path.Join(d, "in_power"+ks+"_input")
			if _, err := fs.Stat(fsys, pw); err != nil {
				continue
			}
			rails = append(rails, rail{l, &term{name: l, power: newValueFile(fsys, pw), scale: 1e-3}})
		}
	}
	if len(rails) == 0 {
		p.unavailable("jetson-ina3221x", "/"+drv, "not present (JetPack ≤ 4 iio layout)")
		return
	}
	p.Sources = append(p.Sources, railSources("jetson-ina3221x", rails)...)
}
