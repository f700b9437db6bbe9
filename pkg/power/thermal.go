package power

import (
	"io/fs"
	"path"
	"strings"
)

// ThermalZone is one /sys/class/thermal zone (temp in m°C), kept open.
type ThermalZone struct {
	Name string // the zone's type (cpu-thermal, soc-thermal, GPU-therm …)
	Path string
	temp *valueFile
}

// FreqDomain is a CPU frequency policy or a devfreq device (GPU/NPU),
// read each tick. A cpufreq policy whose scaling_max_freq sits below
// cpuinfo_max_freq is capped (thermal cooling devices lower it on ARM
// boards): entering that state counts as a throttle event.
type FreqDomain struct {
	Name   string  // "cpufreq policy0", "devfreq fb000000.gpu"
	HWMax  float64 // MHz, hardware maximum; 0 if unknown
	cur    *valueFile
	capped *valueFile // scaling_max_freq, cpufreq only
	toMHz  float64
}

func probeThermal(fsys fs.FS, p *Probed) {
	const dir = "sys/class/thermal"
	zones, _ := fs.Glob(fsys, dir+"/thermal_zone*")
	for _, z := range zones {
		typ, err := readString(fsys, path.Join(z, "type"))
		if err != nil {
			typ = path.Base(z)
		}
		tf := path.Join(z, "temp")
		if _, err := readInt(fsys, tf); err != nil {
			p.unavailable("thermal "+typ, "/"+tf, reasonFor(err))
			continue
		}
		p.Thermal = append(p.Thermal, &ThermalZone{Name: typ, Path: "/" + tf, temp: newValueFile(fsys, tf)})
	}
	if len(p.Thermal) == 0 {
		p.unavailable("thermal", "/"+dir, "no readable thermal zone")
	}
}

func probeFreq(fsys fs.FS, p *Probed) {
	const cpufreq = "sys/devices/system/cpu/cpufreq"
	pols, _ := fs.Glob(fsys, cpufreq+"/policy*")
	for _, pol := range pols {
		cur := path.Join(pol, "scaling_cur_freq")
		if _, err := readInt(fsys, cur); err != nil {
			p.unavailable("cpufreq "+path.Base(pol), "/"+cur, reasonFor(err))
			continue
		}
		d := &FreqDomain{Name: "cpufreq " + path.Base(pol), cur: newValueFile(fsys, cur), toMHz: 1e-3} // kHz
		if hw, err := readInt(fsys, path.Join(pol, "cpuinfo_max_freq")); err == nil {
			d.HWMax = float64(hw) * 1e-3
			if _, err := fs.Stat(fsys, path.Join(pol, "scaling_max_freq")); err == nil {
				d.capped = newValueFile(fsys, path.Join(pol, "scaling_max_freq"))
			}
		}
		p.Freq = append(p.Freq, d)
	}
	if len(pols) == 0 {
		p.unavailable("cpufreq", "/"+cpufreq, "no cpufreq policy")
	}
	const devfreq = "sys/class/devfreq"
	devs, _ := fs.Glob(fsys, devfreq+"/*")
	for _, dv := range devs {
		cur := path.Join(dv, "cur_freq")
		if _, err := readInt(fsys, cur); err != nil {
			continue
		}
		d := &FreqDomain{Name: "devfreq " + path.Base(dv), cur: newValueFile(fsys, cur), toMHz: 1e-6} // Hz
		if hw, err := readInt(fsys, path.Join(dv, "max_freq")); err == nil {
			d.HWMax = float64(hw) * 1e-6
		}
		p.Freq = append(p.Freq, d)
	}
	if len(devs) == 0 {
		p.unavailable("devfreq", "/"+devfreq, "no devfreq device (GPU/NPU frequency not exposed)")
	}
}

// probeThrottle opens Intel's per-core thermal throttle counters; their
// increase over a run counts throttle events.
func probeThrottle(fsys fs.FS, p *Probed) {
	files, _ := fs.Glob(fsys, "sys/devices/system/cpu/cpu*/thermal_throttle/core_throttle_count")
	for _, f := range files {
		if !strings.Contains(f, "/cpu/cpu") {
			continue
		}
		p.throttle = append(p.throttle, newValueFile(fsys, f))
	}
}
