package fleet

import (
	"encoding/json"
	"fmt"
	"github.com/edgeinfer/edgeinfer/update/wire"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
)

// Fleet-side topics live under edgeinfer/v1/<fleet>/_fleet/. Device names
// starting with '_' are reserved for the fleet's own clients (fleet serve
// instances announce themselves as _serve-<instance>).
const (
	fleetDir       = "_fleet"
	instancePrefix = "_serve-"
)

// RolloutTopic is where rollout id is retained.
func RolloutTopic(fleet, id string) string {
	return link.Root + "/" + fleet + "/" + fleetDir + "/rollout/" + id
}

// ControlTopic is where an operator's control of rollout id is retained.
func ControlTopic(fleet, id string) string {
	return link.Root + "/" + fleet + "/" + fleetDir + "/control/" + id
}

// Device is the fleet's view of one device, rebuilt from what it
// published: its retained status (online/offline, board, models), its
// retained update state, and its latest telemetry.
type Device struct {
	ID       string       `json:"device"`
	Status   *link.Status `json:"status,omitempty"`
	Update   *wire.State  `json:"update,omitempty"`
	Perf     *Perf        `json:"perf,omitempty"`
	LastSeen time.Time    `json:"last_seen,omitzero"`
	// checked is Update.Checked as Unix ns, from a view's record (0: parse
	// Update.Checked).
	checked int64
}

// Perf is what the latest telemetry says about serving: the worst TTFT
// p99 of the interval's request classes and the summed goodput. Nil
// fields: the interval had no such requests.
type Perf struct {
	TTFTP99MS   *float64 `json:"ttft_p99_ms"`
	GoodputTokS float64  `json:"goodput_tok_s"`
	Requests    uint64   `json:"requests"`
	Time        string   `json:"time"`
}

// Online says the device's retained status is online.
func (d *Device) Online() bool { return d.Status != nil && d.Status.State == "online" }

// Board is the device's board from its update state or its birth.
func (d *Device) Board() string {
	if d.Update != nil && d.Update.Board != "" {
		return d.Update.Board
	}
	if d.Status != nil && d.Status.Birth != nil {
		return d.Status.Birth.Board
	}
	return ""
}

// View is a fleet instance's picture of the fleet, built only from
// retained and streamed broker messages (Ingest), so any instance that
// subscribes rebuilds the same. It is safe for concurrent use.
type View struct {
	fleet string
	mu    sync.Mutex
	recs  map[string]*record // by device (records.go)
	tb    tables
	outs  map[string]*Rollout
	ctl   map[string]Control
	inst  map[string]bool // serve instances: online
	// leader is the held claim of the highest epoch, vacated only by a
	// record of its own epoch (its holder's will: the will of a claim
	// that lost the race to connect says nothing of the winner's);
	// leaderLast the last record received (the broker's retained value);
	// leaderMax the highest epoch of any record, which a new claim
	// passes.
	leader, leaderLast LeaderRecord
	leaderMax          Epoch
	leaderAt           time.Time // when the last claim record arrived
	// Messages counts ingested messages by kind (status, update,
	// telemetry, rollout, control).
	msgs map[string]uint64
	// changed is closed (and cleared) by the next ingest or put; nil
	// until Changed is called.
	changed chan struct{}
}

// interner shares the label sets and births devices have in common, so a
// record points at one copy instead of holding its own map (records.go
// shares the strings). Each table is dropped when it reaches maxInterned
// entries: what it shared stays shared, and sets no two devices hold (a
// hostile device's, say) cannot grow it.
type interner struct {
	labels map[string]map[string]string
	births map[string]*link.Birth
}

const maxInterned = 1 << 14

// labelSet returns a shared copy of m (callers never change it).
func (in *interner) labelSet(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	var key strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		key.WriteString(k)
		key.WriteByte(0)
		key.WriteString(m[k])
		key.WriteByte(0)
	}
	if v, ok := in.labels[key.String()]; ok {
		return v
	}
	if in.labels == nil || len(in.labels) >= maxInterned {
		in.labels = make(map[string]map[string]string, 64)
	}
	in.labels[key.String()] = maps.Clone(m)
	return in.labels[key.String()]
}

// birth returns a shared copy of b.
func (in *interner) birth(b *link.Birth) *link.Birth {
	if b == nil {
		return nil
	}
	var key strings.Builder
	key.WriteString(b.SDKVersion + "\x00" + b.Board)
	for _, m := range b.Models {
		key.WriteString("\x00" + m.Name + "\x00" + m.Active + "\x00" + m.Previous)
	}
	if v, ok := in.births[key.String()]; ok {
		return v
	}
	if in.births == nil || len(in.births) >= maxInterned {
		in.births = make(map[string]*link.Birth, 64)
	}
	c := &link.Birth{SDKVersion: b.SDKVersion, Board: b.Board, Models: slices.Clone(b.Models)}
	in.births[key.String()] = c
	return c
}

// Changed returns a channel closed the next time the view takes a message
// or a rollout the leader wrote, for a caller to wait on instead of
// polling the view.
func (v *View) Changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.changed == nil {
		v.changed = make(chan struct{})
	}
	return v.changed
}

// changedLocked wakes the waiters of Changed.
func (v *View) changedLocked() {
	if v.changed != nil {
		close(v.changed)
		v.changed = nil
	}
}

// NewView makes an empty view of fleet.
func NewView(fleet string) *View {
	return &View{fleet: fleet, recs: map[string]*record{}, outs: map[string]*Rollout{}, ctl: map[string]Control{},
		inst: map[string]bool{}, msgs: map[string]uint64{}}
}

// Filters are the topic filters a view needs.
func (v *View) Filters() []string {
	b := link.Root + "/" + v.fleet + "/"
	return []string{b + "+/status", b + "+/update", b + "+/telemetry", b + fleetDir + "/rollout/+", b + fleetDir + "/control/+", b + fleetDir + "/leader/+"}
}

// Ingest takes one message. An empty payload clears a retained record.
// Payloads come from any client the broker lets publish there: each is
// size-bounded and checked, and a bad one is an error that changes
// nothing.
func (v *View) Ingest(topic string, payload []byte, now time.Time) error {
	defer func() {
		v.mu.Lock()
		v.changedLocked()
		v.mu.Unlock()
	}()
	rest, ok := strings.CutPrefix(topic, link.Root+"/"+v.fleet+"/")
	if !ok {
		return fmt.Errorf("%w: topic %q is not fleet %s's", ErrMessage, topic, v.fleet)
	}
	if len(payload) > maxRecord {
		return fmt.Errorf("%w: %s: %d bytes", ErrMessage, topic, len(payload))
	}
	parts := strings.Split(rest, "/")
	if len(parts) == 3 && parts[0] == fleetDir {
		return v.ingestFleet(parts[1], parts[2], payload)
	}
	if len(parts) != 2 || parts[0] == "" {
		return fmt.Errorf("%w: topic %q", ErrMessage, topic)
	}
	id, kind := parts[0], parts[1]
	v.mu.Lock()
	defer v.mu.Unlock()
	if strings.HasPrefix(id, instancePrefix) {
		if kind == "status" {
			var s link.Status
			if len(payload) > 0 && json.Unmarshal(payload, &s) == nil {
				v.inst[strings.TrimPrefix(id, instancePrefix)] = s.State == "online"
			} else {
				delete(v.inst, strings.TrimPrefix(id, instancePrefix))
			}
		}
		return nil
	}
	if strings.HasPrefix(id, "_") {
		return nil // another fleet-side client
	}
	d := v.recs[id]
	if d == nil {
		if len(payload) == 0 {
			return nil
		}
		d = &record{id: strings.Clone(id)} // not the topic's bytes
		v.recs[d.id] = d
	}
	v.msgs[kind]++
	switch kind {
	case "status":
		if len(payload) == 0 {
			d.setStatus(&v.tb, nil)
			break
		}
		var s link.Status
		if err := json.Unmarshal(payload, &s); err != nil || (s.State != "online" && s.State != "offline") {
			return fmt.Errorf("%w: %s status: %v", ErrMessage, id, orState(err, s.State))
		}
		d.setStatus(&v.tb, &s)
	case "update":
		if len(payload) == 0 {
			d.setUpdate(&v.tb, nil)
			break
		}
		var s wire.State
		if err := json.Unmarshal(payload, &s); err != nil || s.Schema != wire.StateSchema {
			return fmt.Errorf("%w: %s update state: %v", ErrMessage, id, orSchema(err, s.Schema))
		}
		// The outbox delivers at least once and in order: an older
		// sequence number is a duplicate of a state already seen.
		if d.hasUpdate && s.Seq != 0 && s.Seq < d.seq {
			return nil
		}
		d.setUpdate(&v.tb, &s)
	case "telemetry":
		var s link.Snapshot
		if err := json.Unmarshal(payload, &s); err != nil || s.Schema != link.TelemetrySchema {
			return fmt.Errorf("%w: %s telemetry: %v", ErrMessage, id, orSchema(err, s.Schema))
		}
		d.setPerf(&v.tb, perfOf(&s))
	default:
		return nil
	}
	// A device whose retained records were all cleared is forgotten.
	if d.empty() {
		d.forget(&v.tb)
		delete(v.recs, d.id)
		return nil
	}
	d.lastSeen = now.UnixNano()
	return nil
}

func orState(err error, state string) any {
	if err != nil {
		return err
	}
	return fmt.Sprintf("state %q", state)
}

func orSchema(err error, schema string) any {
	if err != nil {
		return err
	}
	return fmt.Sprintf("schema %q", schema)
}

func perfOf(s *link.Snapshot) *Perf {
	p := &Perf{Time: s.Time}
	for _, r := range s.Requests {
		p.GoodputTokS += r.GoodputTokS
		for _, n := range r.Outcomes {
			p.Requests += n
		}
		if r.TTFT.P99 != nil && (p.TTFTP99MS == nil || *r.TTFT.P99 > *p.TTFTP99MS) {
			v := *r.TTFT.P99
			p.TTFTP99MS = &v
		}
	}
	return p
}

func (v *View) ingestFleet(kind, id string, payload []byte) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch kind {
	case "leader":
		var l LeaderRecord
		if len(payload) > 0 {
			if err := json.Unmarshal(payload, &l); err != nil {
				return fmt.Errorf("%w: leader record: %v", ErrMessage, err)
			}
		}
		v.leaderLast, v.leaderAt = l, time.Now()
		if v.leaderMax.Less(l.Epoch) {
			v.leaderMax = l.Epoch
		}
		switch {
		case l.Held && !l.Epoch.Less(v.leader.Epoch):
			v.leader = l
		case !l.Held && l.Epoch == v.leader.Epoch:
			v.leader.Held = false
		}
	case "rollout":
		v.msgs["rollout"]++
		if len(payload) == 0 {
			delete(v.outs, id)
			return nil
		}
		r, err := ParseRollout(payload)
		if err != nil {
			return err
		}
		if r.ID != id {
			return fmt.Errorf("%w: rollout %q on the topic of %q", ErrRollout, r.ID, id)
		}
		// A record of a lower leader's epoch, or an older one of the
		// same (an instance that lost the lead writing late) does not win.
		if old := v.outs[id]; old != nil && (r.Epoch.Less(old.Epoch) || r.Epoch == old.Epoch && r.Updated.Before(old.Updated)) {
			return nil
		}
		// The targets' names share the records' (the decoded copies, 16
		// bytes a target, go).
		for i, t := range r.Targets {
			if d := v.recs[t]; d != nil {
				r.Targets[i] = d.id
			}
		}
		v.outs[id] = r
	case "control":
		v.msgs["control"]++
		if len(payload) == 0 {
			delete(v.ctl, id)
			return nil
		}
		var c Control
		if err := json.Unmarshal(payload, &c); err != nil {
			return fmt.Errorf("%w: control %s: %v", ErrRollout, id, err)
		}
		v.ctl[id] = c
	}
	return nil
}

// Devices returns the devices' records, each a copy of its own.
func (v *View) Devices() map[string]*Device {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]*Device, len(v.recs))
	for id, r := range v.recs {
		out[id] = r.device(&v.tb)
	}
	return out
}

// Device returns a copy of device id's record, or nil.
func (v *View) Device(id string) *Device {
	v.mu.Lock()
	defer v.mu.Unlock()
	if r := v.recs[id]; r != nil {
		return r.device(&v.tb)
	}
	return nil
}

// Len is how many devices the view holds.
func (v *View) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.recs)
}

// Rollouts returns copies of the rollouts, by id.
func (v *View) Rollouts() []*Rollout {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]*Rollout, 0, len(v.outs))
	for _, id := range slices.Sorted(maps.Keys(v.outs)) {
		c := *v.outs[id]
		c.Targets, c.idx = slices.Clone(c.Targets), nil
		c.RolledBack = slices.Clone(c.RolledBack)
		out = append(out, &c)
	}
	return out
}

// Rollout returns a copy of rollout id, or nil.
func (v *View) Rollout(id string) *Rollout {
	for _, r := range v.Rollouts() {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// Controls returns the retained controls, by rollout id.
func (v *View) Controls() map[string]Control {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.ctl)
}

// LeaderSeen is when the last claim record arrived (zero: never).
func (v *View) LeaderSeen() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.leaderAt
}

// Leader returns the current claim (Held false: vacant), the last
// record received, and the highest epoch of any record.
func (v *View) Leader() (current, last LeaderRecord, highest Epoch) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.leader, v.leaderLast, v.leaderMax
}

// Instances returns the fleet serve instances whose status is online.
func (v *View) Instances() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for id, on := range v.inst {
		if on {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Messages returns how many device messages were ingested, by kind.
func (v *View) Messages() map[string]uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.msgs)
}

// decide runs f under the view's lock with the devices read in place
// and copies of the rollouts that f may change. A copy shares its target
// list and index with the view's record (neither is changed in place:
// Advance gives a rollout a new list), so a leader pass costs no copy of
// the fleet (TestLeadPassMemory).
func (v *View) decide(f func(devs deviceSet, outs []*Rollout, ctls map[string]Control)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	outs := make([]*Rollout, 0, len(v.outs))
	for _, id := range slices.Sorted(maps.Keys(v.outs)) {
		r := v.outs[id]
		r.targetIndex("") // built here, under the lock, once per record
		c := *r
		c.RolledBack = slices.Clone(r.RolledBack)
		outs = append(outs, &c)
	}
	f(&viewSet{v: v}, outs, maps.Clone(v.ctl))
}

// viewSet is a view's records as a deviceSet, under the view's lock: the
// Device it returns is its scratch, valid until the next call, and its
// times are left empty but for Device.checked (record.fill).
type viewSet struct {
	v  *View
	sc scratch
}

func (s *viewSet) get(id string) *Device {
	if r := s.v.recs[id]; r != nil {
		return r.fill(&s.v.tb, &s.sc, false)
	}
	return nil
}

func (s *viewSet) each(f func(string, *Device)) {
	for id, r := range s.v.recs {
		f(id, r.fill(&s.v.tb, &s.sc, false))
	}
}

// put records a rollout the leader just wrote (its own message comes back
// later through the broker).
func (v *View) put(r *Rollout) {
	v.mu.Lock()
	c := *r
	v.outs[r.ID] = &c
	v.changedLocked()
	v.mu.Unlock()
}
