package power

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Method names how a source's readings become energy.
type Method string

// Methods.
const (
	CounterDelta Method = "counter_delta" // differences of a cumulative energy counter
	Trapezoid    Method = "trapezoid"     // trapezoids over timestamped power samples
)

// Info describes a source. Name identifies it by driver name and label,
// never by an unstable index such as hwmonN.
type Info struct {
	Name    string `json:"name"`
	Scope   Scope  `json:"scope"`
	Partial bool   `json:"partial"`
	Method  Method `json:"method"`
	// Resolution is the sensor's own update interval where known; zero
	// means unknown (the sampling period is then the resolution).
	Resolution time.Duration `json:"-"`
	Paths      []string      `json:"paths,omitempty"`
}

// Reading is one read of a source.
type Reading struct {
	// At is when the value was measured; zero means "now" (the sampler
	// stamps it). Plug messages carry their own time.
	At time.Time
	// EnergyUJ is the source's cumulative energy in µJ (CounterDelta
	// sources), already corrected for counter wraps.
	EnergyUJ uint64
	// PowerW is the instantaneous power (Trapezoid sources).
	PowerW float64
	// Gap is true when the energy between the previous reading and this
	// one is unknown (a counter reset by a driver reload, a file that
	// vanished and came back).
	Gap bool
}

// Source is a power or energy sensor. Implementations in this package are
// not safe for concurrent use except where stated; the Sampler reads each
// source from one goroutine.
type Source interface {
	Info() Info
	Read(ctx context.Context) (Reading, error)
	Close() error
}

// counter turns a raw energy counter that wraps at maxRange into a
// monotonic total. A backwards step that is not a plausible wrap (the
// wrapped delta would exceed half the range) is a driver reload: it marks
// a gap and rebases instead of producing negative or absurd energy.
type counter struct {
	last, total, maxRange uint64
	have, gap             bool
}

func (c *counter) add(raw uint64) (gap bool) {
	switch {
	case !c.have:
		c.have = true
	case raw >= c.last:
		c.total += raw - c.last
	case c.maxRange > 0 && c.last <= c.maxRange && c.maxRange-c.last+raw <= c.maxRange/2:
		c.total += c.maxRange - c.last + raw
	default:
		c.gap = true
	}
	c.last = raw
	gap, c.gap = c.gap, false
	return gap
}

// lost marks that readings were missed: the next reading rebases. The
// sampler marks that gap itself, so this is not reported as a reload.
func (c *counter) lost() { c.have = false }

// zone is one energy counter file.
type zone struct {
	file *valueFile
	c    counter
}

// counterSource sums the wrap-corrected totals of one or more energy
// counter files (several RAPL packages, for example).
type counterSource struct {
	info  Info
	zones []*zone
}

func newCounterSource(info Info, zones []*zone) *counterSource {
	info.Method = CounterDelta
	for _, z := range zones {
		info.Paths = append(info.Paths, "/"+z.file.path)
	}
	return &counterSource{info: info, zones: zones}
}

func (s *counterSource) Info() Info { return s.info }

func (s *counterSource) Read(context.Context) (Reading, error) {
	var r Reading
	var errs []error
	for _, z := range s.zones {
		v, err := z.file.readInt()
		if err != nil || v < 0 {
			z.c.lost()
			errs = append(errs, fmt.Errorf("read %s: %w", z.file.path, errors.Join(err, negErr(v))))
			continue
		}
		if z.c.add(uint64(v)) {
			r.Gap = true
		}
		r.EnergyUJ += z.c.total
	}
	if len(errs) > 0 {
		return Reading{}, errors.Join(errs...)
	}
	return r, nil
}

func negErr(v int64) error {
	if v < 0 {
		return fmt.Errorf("negative counter %d: %w", v, ErrParse)
	}
	return nil
}

func (s *counterSource) Close() error {
	var errs []error
	for _, z := range s.zones {
		errs = append(errs, z.file.close())
	}
	return errors.Join(errs...)
}

// term is one power term: a power file times scale, or a voltage file
// times a current file times scale.
type term struct {
	name  string
	power *valueFile
	volt  *valueFile
	curr  *valueFile
	scale float64 // to watts
}

func (t *term) watts() (float64, error) {
	if t.power != nil {
		p, err := t.power.readInt()
		return math.Abs(float64(p)) * t.scale, err
	}
	v, err := t.volt.readInt()
	if err != nil {
		return 0, err
	}
	i, err := t.curr.readInt()
	return math.Abs(float64(v)*float64(i)) * t.scale, err
}

func (t *term) close() error {
	var errs []error
	for _, f := range []*valueFile{t.power, t.volt, t.curr} {
		if f != nil {
			errs = append(errs, f.close())
		}
	}
	return errors.Join(errs...)
}

// powerSource sums instantaneous power terms (rails of one module, or a
// single sensor). guard, when set, must read guardWant for the reading to
// be valid (a battery's status must be Discharging).
type powerSource struct {
	info      Info
	terms     []*term
	guard     *valueFile
	guardWant string
}

func newPowerSource(info Info, terms []*term) *powerSource {
	info.Method = Trapezoid
	for _, t := range terms {
		for _, f := range []*valueFile{t.power, t.volt, t.curr} {
			if f != nil {
				info.Paths = append(info.Paths, "/"+f.path)
			}
		}
	}
	return &powerSource{info: info, terms: terms}
}

func (s *powerSource) Info() Info { return s.info }

func (s *powerSource) Read(context.Context) (Reading, error) {
	if s.guard != nil {
		st, err := s.guard.read()
		if err != nil {
			return Reading{}, fmt.Errorf("read %s: %w", s.guard.path, err)
		}
		if st != s.guardWant {
			return Reading{}, fmt.Errorf("%s: status %q, not %s: %w", s.info.Name, st, s.guardWant, ErrUnavailable)
		}
	}
	var r Reading
	for _, t := range s.terms {
		w, err := t.watts()
		if err != nil {
			return Reading{}, fmt.Errorf("read %s: %w", t.name, err)
		}
		r.PowerW += w
	}
	return r, nil
}

func (s *powerSource) Close() error {
	var errs []error
	for _, t := range s.terms {
		errs = append(errs, t.close())
	}
	if s.guard != nil {
		errs = append(errs, s.guard.close())
	}
	return errors.Join(errs...)
}
