package month_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/wire"
)

// observer is a host application on the broker: a persistent session
// that hears every device's events, states, telemetry and the chunks the
// fleet server sends it. It is how the test counts what was delivered and
// what went over the wire, without trusting either end's own counters.
type observer struct {
	c mqtt.Client

	mu      sync.Mutex
	seqs    map[string]map[uint64]int    // device → seq → copies received
	pieces  map[string][]piece           // device → chunk bytes answered, in order
	gapInfo map[string]map[uint64]string // device → seq → topic and time it came
	totals  map[string]int64             // device "@" version → largest download total
	last    map[string]update.Event      // device → latest event
	events  map[string][]update.Event    // device → every event, in order of arrival
	arrived map[string]time.Time         // device "@" version "/" kind → first arrival
	changed chan struct{}
}

type piece struct {
	at time.Time
	n  int
}

func newObserver(broker, fleetName string) (*observer, error) {
	o := &observer{seqs: map[string]map[uint64]int{}, pieces: map[string][]piece{}, gapInfo: map[string]map[uint64]string{}, totals: map[string]int64{},
		last: map[string]update.Event{}, events: map[string][]update.Event{}, arrived: map[string]time.Time{}, changed: make(chan struct{})}
	filter := link.Root + "/" + fleetName + "/+/#"
	opts := mqtt.NewClientOptions().AddBroker(broker).SetClientID("month-observer").SetCleanSession(false).
		SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(200 * time.Millisecond).
		SetMaxReconnectInterval(200 * time.Millisecond).SetOrderMatters(false)
	// Subscribe again on every connection: a broker restarted without
	// persistence has forgotten the session.
	opts.SetOnConnectHandler(func(c mqtt.Client) { c.Subscribe(filter, 1, o.handle) })
	o.c = mqtt.NewClient(opts)
	if tok := o.c.Connect(); tok.WaitTimeout(10*time.Second) && tok.Error() != nil {
		return nil, tok.Error()
	}
	return o, nil
}

func (o *observer) close() { o.c.Disconnect(100) }

// wake returns a channel closed at the next message.
func (o *observer) wake() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}

func (o *observer) handle(_ mqtt.Client, m mqtt.Message) {
	rest, ok := strings.CutPrefix(m.Topic(), link.Root+"/")
	if !ok {
		return
	}
	parts := strings.SplitN(rest, "/", 3) // fleet, device, what
	if len(parts) < 3 {
		return
	}
	dev, what := parts[1], parts[2]
	o.mu.Lock()
	defer o.mu.Unlock()
	defer func() { close(o.changed); o.changed = make(chan struct{}) }()
	switch {
	case strings.HasPrefix(what, "res/tuf-chunk/"):
		if p := m.Payload(); len(p) > 0 && p[0] == 0 {
			o.pieces[dev] = append(o.pieces[dev], piece{at: time.Now(), n: len(p) - 1})
		}
	case what == "events" || what == "update" || what == "telemetry":
		// Every message the device queues carries its outbox seq; the
		// events topic holds update events (wire.EventSchema) and the
		// device's own (edgeinfer.event/1: started, stopping), whose
		// "event" is a name, not an update.Event.
		var s struct {
			Seq    uint64          `json:"seq"`
			Schema string          `json:"schema"`
			Event  json.RawMessage `json:"event"`
		}
		if json.Unmarshal(m.Payload(), &s) != nil || s.Seq == 0 {
			return
		}
		if o.seqs[dev] == nil {
			o.seqs[dev] = map[uint64]int{}
		}
		o.seqs[dev][s.Seq]++
		if o.gapInfo[dev] == nil {
			o.gapInfo[dev] = map[uint64]string{}
		}
		o.gapInfo[dev][s.Seq] = what + " " + time.Now().Format("15:04:05.000")
		if what != "events" || s.Schema != wire.EventSchema || o.seqs[dev][s.Seq] > 1 {
			return
		}
		var e update.Event
		if json.Unmarshal(s.Event, &e) != nil {
			return
		}
		o.last[dev] = e
		o.events[dev] = append(o.events[dev], e)
		if k := dev + "@" + e.Version + "/" + string(e.Kind); o.arrived[k].IsZero() {
			o.arrived[k] = time.Now()
		}
		if e.Kind == update.EventDownloading {
			k := dev + "@" + e.Version
			o.totals[k] = max(o.totals[k], e.Total)
		}
	}
}

// lastEvent is the device's latest update event.
func (o *observer) lastEvent(dev string) update.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last[dev]
}

// seen says whether dev sent an event of kind for version.
func (o *observer) seen(dev, version string, kind update.EventKind) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.arrived[dev+"@"+version+"/"+string(kind)].IsZero()
}

// refusals lists dev's refused and health_failed events.
func (o *observer) refusals(dev string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, e := range o.events[dev] {
		if e.Kind == update.EventRefused || e.Kind == update.EventHealthFailed {
			r := e.Reason
			if len(r) > 160 {
				r = r[:160] + "…"
			}
			out = append(out, fmt.Sprintf("%s %q: %s", e.Kind, e.Version, r))
		}
	}
	return out
}

// delivery is one device's messages as received: distinct sequence
// numbers, duplicates, and the numbers missing below the highest.
type delivery struct {
	distinct, dups, missing int
	max                     uint64
	gaps                    []uint64 // the first missing numbers
	around                  []string // what came just before and after each
}

func (o *observer) delivery(dev string) delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	var d delivery
	for s, n := range o.seqs[dev] {
		d.distinct++
		d.dups += n - 1
		d.max = max(d.max, s)
	}
	d.missing = int(d.max) - d.distinct
	for s := uint64(1); s <= d.max && len(d.gaps) < 8; s++ {
		if o.seqs[dev][s] == 0 {
			d.gaps = append(d.gaps, s)
			d.around = append(d.around, fmt.Sprintf("%d after %s, before %s", s, o.gapInfo[dev][s-1], o.gapInfo[dev][s+1]))
		}
	}
	return d
}

// wire is the chunk bytes the server sent dev, and the highest share of
// the cap any 10-s window carried.
func (o *observer) wire(dev string, capBytes int64) (bytes int64, worst float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ps := o.pieces[dev]
	j := 0
	var win int64
	for _, p := range ps {
		bytes += int64(p.n)
		win += int64(p.n)
		for ps[j].at.Before(p.at.Add(-10 * time.Second)) {
			win -= int64(ps[j].n)
			j++
		}
		worst = max(worst, float64(win)/float64(capBytes*10))
	}
	return bytes, worst
}

// wireBetween is the chunk bytes the server sent dev between from and to.
func (o *observer) wireBetween(dev string, from, to time.Time) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for _, p := range o.pieces[dev] {
		if !p.at.Before(from) && !p.at.After(to) {
			n += int64(p.n)
		}
	}
	return n
}

// span is when dev's update to version began (offered) and ended
// (verified: every chunk in), as the observer heard them.
func (o *observer) span(dev, version string) (from, to time.Time, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	from, to = o.arrived[dev+"@"+version+"/offered"], o.arrived[dev+"@"+version+"/verified"]
	return from, to, !from.IsZero() && !to.IsZero()
}

// total is the largest download total dev reported for version.
func (o *observer) total(dev, version string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.totals[dev+"@"+version]
}

// changed is the bytes dev had to fetch: for each release it downloaded,
// the largest total its own store said was missing (a resume after a kill
// reports less, never more).
func (o *observer) changedBytes(dev string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for k, v := range o.totals {
		if strings.HasPrefix(k, dev+"@") {
			n += v
		}
	}
	return n
}
