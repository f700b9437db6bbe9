package fleet

import (
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/wire"
)

// A view holds a record per device for as long as the device's retained
// topics say it exists: at a million devices, its size is fleet serve's
// memory. So a record keeps the device's fields as numbers into a table
// of the distinct strings the fleet uses (a few boards, versions, phases,
// the times of a busy second) rather than as strings of its own: 4 bytes
// a field instead of a 16-byte string header, and one allocation a device
// rather than three (TestViewMemoryPerDevice measures it).

// sym is a string in a symtab; 0 is "".
type sym uint32

// symtab holds each distinct string once, counted by the records that use
// it, and forgets it when the last one lets go: strings no two devices
// share (a hostile device's, say) cost only while a device holds them.
type symtab struct {
	strs []string
	refs []uint32
	idx  map[string]sym
	free []sym
}

// get returns s's symbol, counting one more use.
func (t *symtab) get(s string) sym {
	if s == "" {
		return 0
	}
	if i, ok := t.idx[s]; ok {
		t.refs[i]++
		return i
	}
	if t.idx == nil {
		t.idx, t.strs, t.refs = map[string]sym{}, []string{""}, []uint32{0}
	}
	s = string([]byte(s)) // not the payload's bytes, which the record would keep alive
	var i sym
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
		t.strs[i], t.refs[i] = s, 1
	} else {
		i = sym(len(t.strs))
		t.strs, t.refs = append(t.strs, s), append(t.refs, 1)
	}
	t.idx[s] = i
	return i
}

// put lets go of one use of i.
func (t *symtab) put(i sym) {
	if i == 0 {
		return
	}
	if t.refs[i]--; t.refs[i] == 0 {
		delete(t.idx, t.strs[i])
		t.strs[i] = ""
		t.free = append(t.free, i)
	}
}

// str is i's string.
func (t *symtab) str(i sym) string {
	if i == 0 {
		return ""
	}
	return t.strs[i]
}

// Len is how many distinct strings the table holds.
func (t *symtab) Len() int { return len(t.idx) }

// record is a device's retained status, update state and latest
// telemetry, compacted. A zero symbol is an empty string.
type record struct {
	id       string
	lastSeen int64 // unix ns; 0: never
	// status
	hasStatus                                    bool
	stSchema, stState, stFleet, stReason, stTime sym
	birth                                        *link.Birth // shared (interner)
	// update state
	hasUpdate                          bool
	seq, installed, counter            uint64
	upFleet, board, model, active      sym
	previous, phase, version, upReason sym
	lastEvent, refused, refusedVersion sym
	checked, upTime                    sym
	labels                             map[string]string // shared (interner)
	// telemetry
	hasPerf, perfHasTTFT bool
	perfTTFT, goodput    float64
	requests             uint64
	perfTime             sym
}

// setStatus replaces the record's status with s (nil: none).
func (r *record) setStatus(t *symtab, in *interner, s *link.Status) {
	if r.hasStatus {
		for _, x := range [...]sym{r.stSchema, r.stState, r.stFleet, r.stReason, r.stTime} {
			t.put(x)
		}
	}
	r.hasStatus, r.stSchema, r.stState, r.stFleet, r.stReason, r.stTime, r.birth = false, 0, 0, 0, 0, 0, nil
	if s == nil {
		return
	}
	r.hasStatus = true
	r.stSchema, r.stState, r.stFleet, r.stReason, r.stTime = t.get(s.Schema), t.get(s.State), t.get(s.Fleet), t.get(s.Reason), t.get(s.Time)
	r.birth = in.birth(s.Birth)
}

// setUpdate replaces the record's update state with s (nil: none).
func (r *record) setUpdate(t *symtab, in *interner, s *wire.State) {
	if r.hasUpdate {
		for _, x := range [...]sym{r.upFleet, r.board, r.model, r.active, r.previous, r.phase, r.version, r.upReason,
			r.lastEvent, r.refused, r.refusedVersion, r.checked, r.upTime} {
			t.put(x)
		}
	}
	r.hasUpdate, r.seq, r.installed, r.counter, r.labels = false, 0, 0, 0, nil
	r.upFleet, r.board, r.model, r.active, r.previous, r.phase, r.version, r.upReason = 0, 0, 0, 0, 0, 0, 0, 0
	r.lastEvent, r.refused, r.refusedVersion, r.checked, r.upTime = 0, 0, 0, 0, 0
	if s == nil {
		return
	}
	r.hasUpdate, r.seq, r.installed, r.counter, r.labels = true, s.Seq, s.Installed, s.Counter, in.labelSet(s.Labels)
	r.upFleet, r.board, r.model, r.active = t.get(s.Fleet), t.get(s.Board), t.get(s.Model), t.get(s.Active)
	r.previous, r.phase, r.version, r.upReason = t.get(s.Previous), t.get(string(s.Phase)), t.get(s.Version), t.get(s.Reason)
	r.lastEvent, r.refused, r.refusedVersion = t.get(s.LastEvent), t.get(s.Refused), t.get(s.RefusedVersion)
	r.checked, r.upTime = t.get(s.Checked), t.get(s.Time)
}

// setPerf replaces the record's telemetry summary with p (nil: none).
func (r *record) setPerf(t *symtab, p *Perf) {
	if r.hasPerf {
		t.put(r.perfTime)
	}
	r.hasPerf, r.perfHasTTFT, r.perfTTFT, r.goodput, r.requests, r.perfTime = false, false, 0, 0, 0, 0
	if p == nil {
		return
	}
	r.hasPerf, r.goodput, r.requests, r.perfTime = true, p.GoodputTokS, p.Requests, t.get(p.Time)
	if p.TTFTP99MS != nil {
		r.perfHasTTFT, r.perfTTFT = true, *p.TTFTP99MS
	}
}

// empty says the record holds nothing a device published.
func (r *record) empty() bool { return !r.hasStatus && !r.hasUpdate && !r.hasPerf }

// scratch is a Device with room for its parts, for a pass that looks at
// one device at a time without allocating one each (fill).
type scratch struct {
	d  Device
	st link.Status
	up wire.State
	pf Perf
	tt float64
}

// fill writes r's device into sc and returns it. It stays valid until the
// next fill of sc.
func (r *record) fill(t *symtab, sc *scratch) *Device {
	sc.d = Device{ID: r.id}
	if r.lastSeen != 0 {
		sc.d.LastSeen = time.Unix(0, r.lastSeen)
	}
	if r.hasStatus {
		sc.st = link.Status{Schema: t.str(r.stSchema), State: t.str(r.stState), Fleet: t.str(r.stFleet), Device: r.id,
			Reason: t.str(r.stReason), Time: t.str(r.stTime), Birth: r.birth}
		sc.d.Status = &sc.st
	}
	if r.hasUpdate {
		sc.up = wire.State{Schema: wire.StateSchema, Seq: r.seq, Fleet: t.str(r.upFleet), Device: r.id, Board: t.str(r.board),
			Labels: r.labels, Model: t.str(r.model), Active: t.str(r.active), Previous: t.str(r.previous), Installed: r.installed,
			Phase: update.Phase(t.str(r.phase)), Version: t.str(r.version), Counter: r.counter, Reason: t.str(r.upReason),
			LastEvent: t.str(r.lastEvent), Refused: t.str(r.refused), RefusedVersion: t.str(r.refusedVersion),
			Checked: t.str(r.checked), Time: t.str(r.upTime)}
		sc.d.Update = &sc.up
	}
	if r.hasPerf {
		sc.pf = Perf{GoodputTokS: r.goodput, Requests: r.requests, Time: t.str(r.perfTime)}
		if r.perfHasTTFT {
			sc.tt = r.perfTTFT
			sc.pf.TTFTP99MS = &sc.tt
		}
		sc.d.Perf = &sc.pf
	}
	return &sc.d
}

// device returns a Device of its own (the caller may keep it).
func (r *record) device(t *symtab) *Device {
	return r.fill(t, new(scratch))
}
