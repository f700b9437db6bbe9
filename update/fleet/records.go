package fleet

import (
	"strings"
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
	s = strings.Clone(s) // not the payload's bytes, which the record would keep alive
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

// tables are what a view's records share: the strings, label sets and
// births devices have in common, and the few times that are not a
// device's usual UTC RFC 3339 (odd).
type tables struct {
	syms symtab
	in   interner
	odd  map[oddTime]string
}

// oddTime names a record's time field whose text is kept as it came.
type oddTime struct {
	r *record
	f timeField
}

type timeField uint8

const (
	statusTime timeField = iota
	checkedTime
	updateTime
	perfTime
	timeFields
)

// record is a device's retained status, update state and latest
// telemetry, compacted. A zero symbol is an empty string. Times are Unix
// ns (a device writes each state's times afresh, to the nanosecond: as
// strings, three a device that no other shares cost ~300 bytes a device
// in the table); 0 is "" or an odd time's text in tables.odd.
type record struct {
	id       string
	lastSeen int64 // unix ns; 0: never
	times    [timeFields]int64
	// status
	hasStatus                            bool
	stSchema, stState, stFleet, stReason sym
	birth                                *link.Birth // shared (interner)
	// update state
	hasUpdate                          bool
	seq, installed, counter            uint64
	upFleet, board, model, active      sym
	previous, phase, version, upReason sym
	lastEvent, refused, refusedVersion sym
	labels                             map[string]string // shared (interner)
	// telemetry
	hasPerf, perfHasTTFT bool
	perfTTFT, goodput    float64
	requests             uint64
}

// setTime keeps s as field f's time.
func (r *record) setTime(tb *tables, f timeField, s string) {
	r.times[f] = 0
	delete(tb.odd, oddTime{r, f})
	if s == "" {
		return
	}
	if at, err := time.Parse(time.RFC3339Nano, s); err == nil && at.Location() == time.UTC && at.UnixNano() != 0 &&
		at.Format(time.RFC3339Nano) == s {
		r.times[f] = at.UnixNano()
		return
	}
	if tb.odd == nil {
		tb.odd = map[oddTime]string{}
	}
	tb.odd[oddTime{r, f}] = strings.Clone(s)
}

// timeText is field f's time as the device wrote it.
func (r *record) timeText(tb *tables, f timeField) string {
	if ns := r.times[f]; ns != 0 {
		return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
	}
	return tb.odd[oddTime{r, f}]
}

// forget drops what tables hold for r alone.
func (r *record) forget(tb *tables) {
	r.setStatus(tb, nil)
	r.setUpdate(tb, nil)
	r.setPerf(tb, nil)
}

// setStatus replaces the record's status with s (nil: none).
func (r *record) setStatus(tb *tables, s *link.Status) {
	t := &tb.syms
	if r.hasStatus {
		for _, x := range [...]sym{r.stSchema, r.stState, r.stFleet, r.stReason} {
			t.put(x)
		}
	}
	r.hasStatus, r.stSchema, r.stState, r.stFleet, r.stReason, r.birth = false, 0, 0, 0, 0, nil
	r.setTime(tb, statusTime, "")
	if s == nil {
		return
	}
	r.hasStatus = true
	r.stSchema, r.stState, r.stFleet, r.stReason = t.get(s.Schema), t.get(s.State), t.get(s.Fleet), t.get(s.Reason)
	r.setTime(tb, statusTime, s.Time)
	r.birth = tb.in.birth(s.Birth)
}

// setUpdate replaces the record's update state with s (nil: none).
func (r *record) setUpdate(tb *tables, s *wire.State) {
	t := &tb.syms
	if r.hasUpdate {
		for _, x := range [...]sym{r.upFleet, r.board, r.model, r.active, r.previous, r.phase, r.version, r.upReason,
			r.lastEvent, r.refused, r.refusedVersion} {
			t.put(x)
		}
	}
	r.hasUpdate, r.seq, r.installed, r.counter, r.labels = false, 0, 0, 0, nil
	r.upFleet, r.board, r.model, r.active, r.previous, r.phase, r.version, r.upReason = 0, 0, 0, 0, 0, 0, 0, 0
	r.lastEvent, r.refused, r.refusedVersion = 0, 0, 0
	r.setTime(tb, checkedTime, "")
	r.setTime(tb, updateTime, "")
	if s == nil {
		return
	}
	r.hasUpdate, r.seq, r.installed, r.counter, r.labels = true, s.Seq, s.Installed, s.Counter, tb.in.labelSet(s.Labels)
	r.upFleet, r.board, r.model, r.active = t.get(s.Fleet), t.get(s.Board), t.get(s.Model), t.get(s.Active)
	r.previous, r.phase, r.version, r.upReason = t.get(s.Previous), t.get(string(s.Phase)), t.get(s.Version), t.get(s.Reason)
	r.lastEvent, r.refused, r.refusedVersion = t.get(s.LastEvent), t.get(s.Refused), t.get(s.RefusedVersion)
	r.setTime(tb, checkedTime, s.Checked)
	r.setTime(tb, updateTime, s.Time)
}

// setPerf replaces the record's telemetry summary with p (nil: none).
func (r *record) setPerf(tb *tables, p *Perf) {
	r.hasPerf, r.perfHasTTFT, r.perfTTFT, r.goodput, r.requests = false, false, 0, 0, 0
	r.setTime(tb, perfTime, "")
	if p == nil {
		return
	}
	r.hasPerf, r.goodput, r.requests = true, p.GoodputTokS, p.Requests
	r.setTime(tb, perfTime, p.Time)
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

// fill writes r's device into sc and returns it; it stays valid until the
// next fill of sc. With times false the texts of the usual times are left
// empty (formatting them was most of a leader pass's cost), and
// Device.checked says when the last check ended: what rollout decisions
// read (checkedBefore).
func (r *record) fill(tb *tables, sc *scratch, times bool) *Device {
	t := &tb.syms
	sc.d = Device{ID: r.id, checked: r.times[checkedTime]}
	if r.lastSeen != 0 {
		sc.d.LastSeen = time.Unix(0, r.lastSeen)
	}
	text := func(f timeField) string {
		if !times && r.times[f] != 0 {
			return ""
		}
		return r.timeText(tb, f) // an odd time's text costs no formatting
	}
	if r.hasStatus {
		sc.st = link.Status{Schema: t.str(r.stSchema), State: t.str(r.stState), Fleet: t.str(r.stFleet), Device: r.id,
			Reason: t.str(r.stReason), Time: text(statusTime), Birth: r.birth}
		sc.d.Status = &sc.st
	}
	if r.hasUpdate {
		sc.up = wire.State{Schema: wire.StateSchema, Seq: r.seq, Fleet: t.str(r.upFleet), Device: r.id, Board: t.str(r.board),
			Labels: r.labels, Model: t.str(r.model), Active: t.str(r.active), Previous: t.str(r.previous), Installed: r.installed,
			Phase: update.Phase(t.str(r.phase)), Version: t.str(r.version), Counter: r.counter, Reason: t.str(r.upReason),
			LastEvent: t.str(r.lastEvent), Refused: t.str(r.refused), RefusedVersion: t.str(r.refusedVersion),
			Checked: text(checkedTime), Time: text(updateTime)}
		sc.d.Update = &sc.up
	}
	if r.hasPerf {
		sc.pf = Perf{GoodputTokS: r.goodput, Requests: r.requests, Time: text(perfTime)}
		if r.perfHasTTFT {
			sc.tt = r.perfTTFT
			sc.pf.TTFTP99MS = &sc.tt
		}
		sc.d.Perf = &sc.pf
	}
	return &sc.d
}

// device returns a Device of its own (the caller may keep it).
func (r *record) device(tb *tables) *Device {
	return r.fill(tb, new(scratch), true)
}
