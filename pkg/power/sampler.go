package power

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultPeriod is the sampling period of a Sampler: 20 Hz.
const DefaultPeriod = 50 * time.Millisecond

// SamplerOptions configures a Sampler. The zero value samples at 20 Hz.
type SamplerOptions struct {
	// Period between samples of local sensors; zero means DefaultPeriod.
	// Sources with a coarser resolution (smart plugs) are read at their
	// own resolution in their own goroutine, so a slow plug never delays
	// the local sensors.
	Period time.Duration
	// Logger receives read failures; nil discards.
	Logger *slog.Logger
}

// point is one reading of a source.
type point struct {
	at       time.Time
	energyUJ uint64
	powerW   float64
	gap      bool // the energy since the previous point is unknown
}

// series is the history of one source.
type series struct {
	src     Source
	info    Info
	points  []point
	pending bool // a read failed: the next point starts after a gap
}

// sysPoint is one tick of the thermal and frequency monitor.
type sysPoint struct {
	at       time.Time
	tempC    []float64 // NaN-free: a failed read repeats nothing, it is flagged
	tempOK   []bool
	freqMHz  []float64
	freqOK   []bool
	capped   []bool
	throttle int64
}

// Sampler samples every probed source, thermal zone and frequency domain
// on absolute deadlines (start + k·period, so latency in one tick does not
// shift the next) with their files kept open. It owns the Probed it was
// given and closes it in Close. Its methods are safe for concurrent use.
type Sampler struct {
	opt    SamplerOptions
	probed *Probed
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		started, closed bool
		series          []*series
		sys             []sysPoint
		notes           map[string]int
		noteOrder       []string
		ticks, overruns int
	}
}

// NewSampler returns a sampler over p; it takes ownership of p.
func NewSampler(p *Probed, opt SamplerOptions) *Sampler {
	if opt.Period <= 0 {
		opt.Period = DefaultPeriod
	}
	s := &Sampler{opt: opt, probed: p, log: opt.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mu.notes = map[string]int{}
	for _, src := range p.Sources {
		s.mu.series = append(s.mu.series, &series{src: src, info: src.Info()})
	}
	return s
}

// Start begins sampling until ctx is done or Stop is called.
func (s *Sampler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return fmt.Errorf("start: %w", ErrClosed)
	}
	if s.mu.started {
		return fmt.Errorf("start: %w", ErrStarted)
	}
	s.mu.started = true
	ctx, s.cancel = context.WithCancel(ctx)
	var local []*series
	for _, sr := range s.mu.series {
		if sr.info.Resolution > s.opt.Period {
			s.wg.Go(func() {
				s.loop(ctx, sr.info.Resolution, func() { s.readSource(ctx, sr) })
			})
			continue
		}
		local = append(local, sr)
	}
	s.wg.Go(func() {
		s.loop(ctx, s.opt.Period, func() {
			for _, sr := range local {
				s.readSource(ctx, sr)
			}
			s.readSys()
		})
	})
	return nil
}

// loop calls tick at start + k·period until ctx is done. Deadlines missed
// entirely (the process was descheduled) are skipped, not bunched up.
func (s *Sampler) loop(ctx context.Context, period time.Duration, tick func()) {
	start := time.Now()
	tick()
	t := time.NewTimer(period)
	defer t.Stop()
	for k := int64(1); ; k++ {
		d := time.Until(start.Add(time.Duration(k) * period))
		if d < 0 {
			k += int64(-d/period) + 1
			d = time.Until(start.Add(time.Duration(k) * period))
			s.mu.Lock()
			s.mu.overruns++
			s.mu.Unlock()
		}
		t.Reset(d)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tick()
	}
}

// readSource reads one source. Only this source's goroutine touches sr's
// source; its points are guarded by s.mu.
func (s *Sampler) readSource(ctx context.Context, sr *series) {
	r, err := sr.src.Read(ctx)
	at := r.At
	if at.IsZero() {
		at = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return // stopping: not a sensor fault
		}
		sr.pending = true
		s.noteLocked(fmt.Sprintf("%s: %v (gap)", sr.info.Name, err))
		return
	}
	if n := len(sr.points); n > 0 && !at.After(sr.points[n-1].at) {
		return // a plug message already seen
	}
	sr.points = append(sr.points, point{at: at, energyUJ: r.EnergyUJ, powerW: r.PowerW, gap: r.Gap || sr.pending})
	if r.Gap {
		s.noteLocked(sr.info.Name + ": counter went backwards beyond a wrap (driver reload?): gap")
	}
	sr.pending = false
}

// readSys reads every thermal zone, frequency domain and throttle counter.
func (s *Sampler) readSys() {
	p := s.probed
	sp := sysPoint{
		tempC: make([]float64, len(p.Thermal)), tempOK: make([]bool, len(p.Thermal)),
		freqMHz: make([]float64, len(p.Freq)), freqOK: make([]bool, len(p.Freq)), capped: make([]bool, len(p.Freq)),
	}
	var errs []string
	for i, z := range p.Thermal {
		v, err := z.temp.readInt()
		if err != nil {
			errs = append(errs, fmt.Sprintf("thermal %s: %v", z.Name, err))
			continue
		}
		sp.tempC[i], sp.tempOK[i] = float64(v)/1000, true
	}
	for i, d := range p.Freq {
		v, err := d.cur.readInt()
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", d.Name, err))
			continue
		}
		sp.freqMHz[i], sp.freqOK[i] = float64(v)*d.toMHz, true
		if d.capped != nil {
			if m, err := d.capped.readInt(); err == nil && float64(m)*d.toMHz < d.HWMax {
				sp.capped[i] = true
			}
		}
	}
	for _, f := range p.throttle {
		if v, err := f.readInt(); err == nil {
			sp.throttle += v
		}
	}
	sp.at = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.ticks++
	s.mu.sys = append(s.mu.sys, sp)
	for _, e := range errs {
		s.noteLocked(e)
	}
}

// noteLocked records a note once, counting repeats.
func (s *Sampler) noteLocked(n string) {
	if s.mu.notes[n] == 0 {
		s.mu.noteOrder = append(s.mu.noteOrder, n)
		s.log.Warn("power sampler", "note", n)
	}
	s.mu.notes[n]++
}

// Stop stops sampling and waits for the sampling goroutines to return.
// The history stays available to Report. Stop is idempotent.
func (s *Sampler) Stop() {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// Close stops sampling and closes every sensor file. It is idempotent.
func (s *Sampler) Close() error {
	s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	return s.probed.Close()
}

// Ticks returns how many local ticks ran and how many deadlines were
// skipped because a tick overran.
func (s *Sampler) Ticks() (ticks, overruns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.ticks, s.mu.overruns
}
