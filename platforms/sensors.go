package platforms

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/power"
)

// SensorReport is what the board's sensors are, read through pkg/power's
// probe under the plan's root, checked against what the profile expects.
type SensorReport struct {
	Power     []PowerSensor       `json:"power"`
	Thermal   []string            `json:"thermal"`
	Frequency []string            `json:"frequency"`
	Absent    []power.Unavailable `json:"absent"`
	// Primary is the power source a report leads with ("" when none).
	Primary string `json:"primary,omitempty"`
	// Warnings are expected sensors that are missing, with what to do.
	Warnings []string `json:"warnings,omitempty"`
}

// PowerSensor is one usable power or energy source.
type PowerSensor struct {
	Name    string      `json:"name"`
	Scope   power.Scope `json:"scope"`
	Partial bool        `json:"partial"`
	Paths   []string    `json:"paths,omitempty"`
}

// CheckSensors probes the sensors under the plan's root (the local sysfs
// ones; smart plugs are configured elsewhere) and warns about every sensor
// the profile expects that is not there.
func CheckSensors(ctx context.Context, p Plan) SensorReport {
	root := p.Facts.Root
	if root == "" {
		root = "/"
	}
	pr := power.Probe(ctx, os.DirFS(root), power.ProbeOptions{})
	defer pr.Close()
	r := SensorReport{Absent: pr.Unavailable, Thermal: []string{}, Frequency: []string{}, Power: []PowerSensor{}}
	for _, s := range pr.Sources {
		i := s.Info()
		r.Power = append(r.Power, PowerSensor{Name: i.Name, Scope: i.Scope, Partial: i.Partial, Paths: i.Paths})
	}
	if s, ok := pr.Primary(); ok {
		r.Primary = s.Info().Name
	}
	for _, z := range pr.Thermal {
		r.Thermal = append(r.Thermal, z.Name+" "+z.Path)
	}
	for _, d := range pr.Freq {
		r.Frequency = append(r.Frequency, d.Name)
	}
	for _, w := range p.Sensors {
		if !w.Expected || r.has(w) {
			continue
		}
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s sensor %q expected on %s but absent (%s): %s",
			w.Kind, w.Source, p.Board, r.why(w.Source), missingFix(w)))
	}
	return r
}

func (r SensorReport) has(w SensorWant) bool {
	switch w.Kind {
	case "thermal":
		return len(r.Thermal) > 0
	case "frequency":
		for _, f := range r.Frequency {
			if strings.HasPrefix(f, w.Source) {
				return true
			}
		}
		return false
	}
	for _, s := range r.Power {
		if strings.HasPrefix(s.Name, w.Source) {
			return true
		}
	}
	return false
}

// why collects the probe's reasons for a source.
func (r SensorReport) why(source string) string {
	var out []string
	for _, u := range r.Absent {
		if strings.HasPrefix(u.Source, source) {
			s := u.Reason
			if u.Path != "" {
				s += " at " + u.Path
			}
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "not found"
	}
	return strings.Join(out, "; ")
}

func missingFix(w SensorWant) string {
	switch w.Source {
	case "jetson-ina3221":
		return "energy will be null; check that the ina3221 driver is bound (ls /sys/bus/i2c/drivers/ina3221/*/hwmon) and that this really is a Jetson"
	case "rapl":
		return "energy will be null; RAPL's energy_uj is root-only since Linux 5.10: run as root or grant read access (chmod o+r on the intel-rapl energy_uj files)"
	case "nvml":
		return "GPU energy will be null; build with -tags nvml and install the NVIDIA driver (libnvidia-ml.so.1)"
	case "thermal":
		return "throttling cannot be seen; check that /sys/class/thermal is mounted (in a container: bind it)"
	}
	return "the figures that need it will be null"
}
