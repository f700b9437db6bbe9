package power

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"slices"
	"time"
)

// Unavailable records a source that was probed and cannot be used, and why.
type Unavailable struct {
	Source string `json:"source"`
	Path   string `json:"path,omitempty"`
	Reason string `json:"reason"`
}

// ProbeOptions configures Probe. The zero value probes the local sysfs
// sensors only.
type ProbeOptions struct {
	// ShellyAddrs are host[:port] addresses of Shelly Gen2+ plugs.
	ShellyAddrs []string
	// HTTPClient is used for Shelly plugs; nil means a default client.
	HTTPClient *http.Client
	// PlugTimeout bounds one plug request; zero means 500 ms.
	PlugTimeout time.Duration
	// Extra sources are added as they are (Tasmota plugs fed from MQTT).
	Extra []Source
}

// Probed is what Probe found: power sources, thermal zones, frequency
// domains and throttle counters, and every probed source that is
// unavailable with its reason. Close releases the open files. A Probed is
// not safe for concurrent use; hand it to one Sampler.
type Probed struct {
	Sources     []Source
	Thermal     []*ThermalZone
	Freq        []*FreqDomain
	throttle    []*valueFile
	Unavailable []Unavailable
}

// Probe finds the sensors visible through fsys, which is rooted at "/"
// (os.DirFS("/") in production). It never fails: what it cannot use is
// listed in Unavailable.
func Probe(ctx context.Context, fsys fs.FS, opt ProbeOptions) *Probed {
	p := &Probed{}
	probeRAPL(fsys, p)
	probeHwmon(fsys, p)
	probeINA3221(fsys, p)
	probeINA3221x(fsys, p)
	probeBattery(fsys, p)
	probeNVML(p)
	probeShelly(ctx, opt, p)
	p.Sources = append(p.Sources, opt.Extra...)
	if len(opt.ShellyAddrs) == 0 && len(opt.Extra) == 0 {
		p.unavailable("smart-plug", "", "no smart plug configured (Shelly address or Tasmota topic)")
	}
	probeThermal(fsys, p)
	probeFreq(fsys, p)
	probeThrottle(fsys, p)
	return p
}

func (p *Probed) unavailable(source, path, reason string) {
	p.Unavailable = append(p.Unavailable, Unavailable{Source: source, Path: path, Reason: reason})
}

// Primary returns the source whose energy a report leads with: the widest
// scope, complete before partial, counters before power samples.
func (p *Probed) Primary() (Source, bool) {
	if len(p.Sources) == 0 {
		return nil, false
	}
	return slices.MinFunc(p.Sources, comparePrimary), true
}

func comparePrimary(a, b Source) int {
	ia, ib := a.Info(), b.Info()
	return cmp.Or(
		cmp.Compare(ia.Scope.rank(), ib.Scope.rank()),
		cmp.Compare(boolInt(ia.Partial), boolInt(ib.Partial)),
		cmp.Compare(boolInt(ia.Method != CounterDelta), boolInt(ib.Method != CounterDelta)),
	)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Close closes every file the probe left open.
func (p *Probed) Close() error {
	var errs []error
	for _, s := range p.Sources {
		errs = append(errs, s.Close())
	}
	for _, z := range p.Thermal {
		errs = append(errs, z.temp.close())
	}
	for _, d := range p.Freq {
		errs = append(errs, d.cur.close(), d.capped.close())
	}
	for _, f := range p.throttle {
		errs = append(errs, f.close())
	}
	return errors.Join(errs...)
}

// reasonFor turns a probing error into a reason a person can act on.
func reasonFor(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "not present"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	default:
		return err.Error()
	}
}
