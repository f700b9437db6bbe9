package link

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// Birth is what the device announces on its retained status topic each
// time it connects.
type Birth struct {
	SDKVersion string         `json:"sdk_version"`
	Board      string         `json:"board"`
	Models     []ModelVersion `json:"models"`
}

// ModelVersion is one model's active and previous (rollback) version.
type ModelVersion struct {
	Name     string `json:"name"`
	Active   string `json:"active"`
	Previous string `json:"previous,omitempty"`
}

// StatusSchema versions the status payload.
const StatusSchema = "edgeinfer.status/1"

// Status is the retained payload of the status topic: state "online"
// (birth, with the Birth fields), or "offline" (the will, when the broker
// loses the device, or the device's own goodbye on Close).
type Status struct {
	Schema string `json:"schema"`
	State  string `json:"state"`
	Fleet  string `json:"fleet"`
	Device string `json:"device"`
	Reason string `json:"reason,omitempty"`
	Time   string `json:"time,omitempty"` // RFC 3339, UTC; absent in the will (written ahead of time)
	*Birth
}

// Message is a message delivered to a subscription's handler.
type Message struct {
	Topic    string
	Payload  []byte
	Retained bool
}

// Stats are the link's counters.
type Stats struct {
	Connected bool
	// Connects counts successful connections; Failures failed attempts.
	Connects, Failures uint64
	// HandlerDrops counts messages dropped because a handler queue was full.
	HandlerDrops uint64
	// LastError is the last connection or subscription error ("" if none).
	LastError string
	// Since is when the broker accepted the current connection (its
	// CONNACK, before the connection's subscriptions were made): a retained
	// message received before it came on an earlier connection. Zero while
	// disconnected.
	Since time.Time
}

// Link is the device's one MQTT connection, shared by telemetry, commands,
// the outbox and the update transport. It connects in the background and
// keeps reconnecting (exponential backoff with jitter) until Close; while
// the broker is away, publishing through the Outbox keeps working and
// direct publishes fail with ErrNotConnected.
//
// Each connection attempt builds a fresh paho client under the same client
// id with clean session false, so the broker keeps the device's session
// and subscriptions, while nothing of a dead connection survives in the
// client: no token of it can complete late and no message id stays
// claimed (paho issues #453, #593). Only one client is live at a time.
//
// Link is safe for concurrent use.
type Link struct {
	cfg    Config
	topics Topics
	log    *slog.Logger
	tls    *tls.Config
	birth  func() Birth
	hooks  Hooks

	ctx    context.Context // the link's lifetime, cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ended  chan struct{} // closed when supervise returns

	connects, failures, drops atomic.Uint64

	mu struct {
		sync.Mutex
		conn    *conn // nil while disconnected
		up      chan struct{}
		lastErr error
		subs    map[string]*subscription
		pending map[string]chan []byte // request id -> waiter
		changed chan struct{}          // closed and replaced when Stats' counters change
	}

	closeOnce sync.Once
	closeErr  error
}

// conn is one live connection: its client and a channel closed when it is
// lost.
type conn struct {
	client   mqtt.Client
	down     chan struct{}
	downOnce sync.Once
	will     *lastWill // the Hooks.Will of this connection, nil without one
	since    time.Time // the CONNACK's arrival (Stats.Since)
	// forgotten: the broker answered a persistent session's CONNECT
	// without it (session present 0): it restarted without its
	// persistence, or expired the session, and may have lost messages it
	// had acknowledged and not yet delivered (see Outbox).
	forgotten bool
}

// lastWill is a last will message, kept so a clean goodbye can publish it.
type lastWill struct {
	topic    string
	payload  []byte
	qos      byte
	retained bool
}

func (c *conn) lost() { c.downOnce.Do(func() { close(c.down) }) }

type subscription struct {
	filter string
	qos    byte
	queue  *msgQueue
}

// Hooks customise what a Link does on each connection; the zero value is
// the edgeinfer status will and birth alone.
type Hooks struct {
	// Birth is called on every connection for the status payload; nil
	// announces no versions.
	Birth func() Birth
	// Will, when set, replaces the status will, and is called before every
	// connection attempt: Sparkplug's NDEATH carries a bdSeq that changes
	// with each attempt. The status topic then gets no "offline" when the
	// connection is lost (only on Close). Close publishes the connection's
	// will itself before its goodbye, since a clean DISCONNECT makes the
	// broker discard it (Sparkplug: an edge node MUST publish an NDEATH
	// before terminating the connection).
	Will func() (topic string, payload []byte, qos byte, retained bool)
	// OnConnect runs on every new connection after the subscriptions and
	// before anything else is published (Sparkplug's NBIRTH must be the
	// first message of a session). publish sends directly on the new
	// connection and waits for it. An error drops the connection; the link
	// tries again.
	OnConnect func(ctx context.Context, publish func(topic string, qos byte, retained bool, payload []byte) error) error
}

// Open validates cfg, reads the TLS files and starts connecting in the
// background; it does not wait for the broker (see WaitConnected). birth,
// which may be nil, is called on every connection for the status payload.
func Open(ctx context.Context, cfg Config, birth func() Birth) (*Link, error) {
	return OpenWith(ctx, cfg, Hooks{Birth: birth})
}

// OpenWith is Open with hooks.
func OpenWith(ctx context.Context, cfg Config, h Hooks) (*Link, error) {
	birth := h.Birth
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	if birth == nil {
		birth = func() Birth { return Birth{} }
	}
	l := &Link{cfg: cfg, topics: NewTopics(cfg.Fleet, cfg.Device), log: cfg.Logger, tls: tlsCfg, birth: birth, hooks: h}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.mu.up = make(chan struct{})
	l.mu.changed = make(chan struct{})
	l.ended = make(chan struct{})
	l.mu.subs = map[string]*subscription{}
	l.mu.pending = map[string]chan []byte{}
	if _, err := l.register(l.topics.Base()+"res/#", 1, l.onResponse); err != nil {
		return nil, err
	}
	l.wg.Add(1)
	go l.supervise()
	return l, nil
}

// Ended is closed when the link stops connecting: on Close, and for a
// link of Config.Once when its one attempt fails or its connection is
// lost.
func (l *Link) Ended() <-chan struct{} { return l.ended }

// Topics returns the device's topic names.
func (l *Link) Topics() Topics { return l.topics }

// WaitConnected waits until the link is connected, or ctx ends; then it
// returns ctx's error joined with the last connection error, which names
// the cause (ErrUnreachable, ErrAuth, ErrUnknownCA, ...).
func (l *Link) WaitConnected(ctx context.Context) error {
	l.mu.Lock()
	up := l.mu.up
	l.mu.Unlock()
	select {
	case <-up:
		return nil
	case <-l.ctx.Done():
		return ErrClosed
	case <-l.ended: // a link of Config.Once that will not connect now
		l.mu.Lock()
		last := l.mu.lastErr
		l.mu.Unlock()
		return errors.Join(ErrNotConnected, last)
	case <-ctx.Done():
		l.mu.Lock()
		last := l.mu.lastErr
		l.mu.Unlock()
		return errors.Join(ctx.Err(), last)
	}
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := Stats{Connected: l.mu.conn != nil, Connects: l.connects.Load(), Failures: l.failures.Load(), HandlerDrops: l.drops.Load()}
	if l.mu.conn != nil {
		st.Since = l.mu.conn.since
	}
	if l.mu.lastErr != nil {
		st.LastError = l.mu.lastErr.Error()
	}
	return st
}

// Changed returns a channel closed at the next change of Stats (a
// connection made or lost, a failed attempt, a message a handler's full
// queue dropped), for a caller to wait on instead of polling Stats.
func (l *Link) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.changed
}

// changedLocked wakes the waiters of Changed.
func (l *Link) changedLocked() {
	close(l.mu.changed)
	l.mu.changed = make(chan struct{})
}

// changed is changedLocked for a caller without l.mu.
func (l *Link) changed() {
	l.mu.Lock()
	l.changedLocked()
	l.mu.Unlock()
}

// current returns the live connection and the channel closed when the
// link next comes up (for a caller to wait on when conn is nil).
func (l *Link) current() (*conn, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.conn, l.mu.up
}

// Publish sends one message directly (not through the outbox) and waits
// for its PUBACK at QoS 1 (or for it to be written at QoS 0). It fails
// with ErrNotConnected while the broker is away: use an Outbox for what
// must not be lost.
func (l *Link) Publish(ctx context.Context, topic string, qos byte, retained bool, payload []byte) error {
	c, _ := l.current()
	if c == nil {
		return fmt.Errorf("link: publish %s: %w", topic, ErrNotConnected)
	}
	tok := c.client.Publish(topic, qos, retained, payload)
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			return fmt.Errorf("link: publish %s: %w", topic, err)
		}
		return nil
	case <-c.down:
		return fmt.Errorf("link: publish %s: %w (connection lost)", topic, ErrNotConnected)
	case <-ctx.Done():
		return fmt.Errorf("link: publish %s: %w", topic, ctx.Err())
	}
}

// Subscribe registers h for messages matching filter, now and on every
// reconnection. h runs on the subscription's own goroutine, one message
// at a time, fed by a queue of Config.QueueLen messages: paho's reader
// never waits for h (a blocking handler would stall keep-alives, paho
// #208), and a message that finds the queue full is dropped and counted
// (Stats.HandlerDrops). At QoS 1 paho has already acknowledged it.
//
// When connected, Subscribe waits for the SUBACK and returns ErrACL if the
// broker refused the filter; otherwise the subscription is made on the
// next connection.
func (l *Link) Subscribe(ctx context.Context, filter string, qos byte, h func(Message)) error {
	s, err := l.register(filter, qos, h)
	if err != nil {
		return err
	}
	c, _ := l.current()
	if c == nil {
		return nil
	}
	return l.subscribe(ctx, c, s)
}

func (l *Link) register(filter string, qos byte, h func(Message)) (*subscription, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return nil, ErrClosed
	}
	if _, dup := l.mu.subs[filter]; dup {
		return nil, fmt.Errorf("link: subscribe %s: already subscribed", filter)
	}
	s := &subscription{filter: filter, qos: qos, queue: newMsgQueue(l.cfg.QueueLen)}
	l.mu.subs[filter] = s
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			for m, ok := s.queue.pop(); ok; m, ok = s.queue.pop() {
				if l.ctx.Err() != nil {
					return
				}
				h(m)
			}
			select {
			case <-s.queue.ready:
			case <-l.ctx.Done():
				return
			}
		}
	}()
	return s, nil
}

// deliver is the paho callback of s: it queues without waiting.
func (l *Link) deliver(s *subscription) mqtt.MessageHandler {
	return func(_ mqtt.Client, m mqtt.Message) {
		if !s.queue.push(Message{Topic: m.Topic(), Payload: m.Payload(), Retained: m.Retained()}) {
			l.drops.Add(1)
			l.changed()
		}
	}
}

func (l *Link) subscribe(ctx context.Context, c *conn, s *subscription) error {
	wait := idInUseWait
	for try := 1; ; try++ {
		tok := c.client.Subscribe(s.filter, s.qos, l.deliver(s))
		select {
		case <-tok.Done():
		case <-c.down:
			return fmt.Errorf("link: subscribe %s: %w (connection lost)", s.filter, ErrNotConnected)
		case <-ctx.Done():
			return fmt.Errorf("link: subscribe %s: %w", s.filter, ctx.Err())
		}
		if err := tok.Error(); err != nil {
			return fmt.Errorf("link: subscribe %s: %w", s.filter, err)
		}
		// One filter a SUBSCRIBE, so one return code. paho keys it by the
		// filter as it routes it: a shared subscription's without its
		// "$share/<group>/" prefix, so looking it up by s.filter found
		// nothing there and read every shared subscription as granted,
		// 0x91 included (TestSubscribeAfterIDInUse/shared).
		var rc byte
		ok := false
		for _, code := range tok.(*mqtt.SubscribeToken).Result() {
			rc, ok = code, true
		}
		l.log.Debug("link: SUBACK", "filter", s.filter, "code", rc, "try", try)
		switch {
		case !ok:
			return fmt.Errorf("link: subscribe %s: a SUBACK without a return code", s.filter)
		case rc < 0x80:
			return nil
		case rc == subackIDInUse && try < idInUseTries:
			// mochi-mqtt answers a SUBSCRIBE whose packet identifier is
			// one of its own messages in flight to this client (the two
			// directions' identifiers are apart in MQTT) with MQTT 5's
			// 0x91, packet identifier in use, even to a 3.1.1 client.
			// Both sides count identifiers up from 1 on a new
			// connection, so right after connecting (retained records
			// or queued messages flowing in, acknowledged late on a
			// loaded machine) paho's next identifiers are the broker's
			// in flight, and asking again at once meets the next one.
			// paho picks the next identifier each time; waiting lets
			// the acknowledgements free the broker's.
			select {
			case <-time.After(wait):
			case <-c.down:
				return fmt.Errorf("link: subscribe %s: %w (connection lost)", s.filter, ErrNotConnected)
			case <-ctx.Done():
				return fmt.Errorf("link: subscribe %s: SUBACK 0x91 (packet identifier in use) %d times: %w", s.filter, try, ctx.Err())
			}
			wait = min(2*wait, idInUseMaxWait)
			continue
		case rc == subackIDInUse:
			return fmt.Errorf("link: subscribe %s: SUBACK 0x91 (packet identifier in use) %d times", s.filter, try)
		}
		// mosquitto answers a filter its ACL refuses with return code 0x80.
		return fmt.Errorf("%w: subscription to %s (SUBACK 0x%02x; the broker's ACL does not let this client subscribe to it)", ErrACL, s.filter, rc)
	}
}

// subackIDInUse is MQTT 5's reason code "packet identifier in use".
const subackIDInUse = 0x91

// A SUBSCRIBE answered 0x91 is asked again after idInUseWait, doubling to
// idInUseMaxWait, at most idInUseTries times in all (about 10 s): the
// broker's identifiers in flight are freed as this client acknowledges
// them (TestSubscribeAfterIDInUse).
const (
	idInUseWait    = 5 * time.Millisecond
	idInUseMaxWait = 500 * time.Millisecond
	idInUseTries   = 28
)

// supervise owns the connection: it connects, waits for the connection to
// be lost, and reconnects with backoff, until Close.
func (l *Link) supervise() {
	defer l.wg.Done()
	defer close(l.ended)
	for attempt := 0; ; {
		c, err := l.connect()
		if err != nil {
			l.setErr(err) // before the count: a reader that sees the count sees the error
			l.failures.Add(1)
			l.changed()
			l.log.Warn("link: connect failed", "broker", l.cfg.Broker, "attempt", attempt+1, "err", err)
			if l.cfg.Once {
				return
			}
			t := time.NewTimer(backoff(attempt, l.cfg.BackoffMin, l.cfg.BackoffMax, rand.Float64()))
			attempt++
			select {
			case <-t.C:
				continue
			case <-l.ctx.Done():
				t.Stop()
				return
			}
		}
		attempt = 0
		select {
		case <-c.down:
			l.mu.Lock()
			l.mu.conn = nil
			l.mu.up = make(chan struct{})
			l.changedLocked()
			l.mu.Unlock()
			l.log.Warn("link: connection lost", "broker", l.cfg.Broker)
			if l.cfg.Once {
				return
			}
		case <-l.ctx.Done():
			l.goodbye(c)
			return
		}
	}
}

// backoff is the wait before attempt n+1 (n from 0): min·2ⁿ capped at max,
// drawn from [d/2, d] by r ∈ [0, 1).
func backoff(n int, lo, hi time.Duration, r float64) time.Duration {
	d := lo
	for i := 0; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + time.Duration(r*float64(d/2))
}

func (l *Link) setErr(err error) {
	l.mu.Lock()
	l.mu.lastErr = err
	l.mu.Unlock()
}

// connect makes one connection attempt: CONNECT with the will, the
// subscriptions, then the birth message.
func (l *Link) connect() (*conn, error) {
	will, _ := json.Marshal(Status{Schema: StatusSchema, State: "offline", Fleet: l.cfg.Fleet, Device: l.cfg.Device, Reason: "connection lost"})
	c := &conn{down: make(chan struct{})}
	opts := mqtt.NewClientOptions().
		AddBroker(l.cfg.Broker).
		SetClientID(l.cfg.ClientID).
		SetUsername(l.cfg.Username).
		SetPassword(l.cfg.Password).
		SetCleanSession(l.cfg.CleanSession).
		SetProtocolVersion(4).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetKeepAlive(l.cfg.KeepAlive).
		SetPingTimeout(l.cfg.ConnectTimeout).
		SetConnectTimeout(l.cfg.ConnectTimeout).
		SetWriteTimeout(l.cfg.ConnectTimeout).
		SetBinaryWill(l.topics.Status(), will, 1, true).
		SetConnectionLostHandler(func(mqtt.Client, error) { c.lost() })
	if l.hooks.Will != nil {
		topic, payload, qos, retained := l.hooks.Will()
		opts.SetBinaryWill(topic, payload, qos, retained)
		c.will = &lastWill{topic: topic, payload: payload, qos: qos, retained: retained}
	}
	if l.tls != nil {
		opts.SetTLSConfig(l.tls)
	}
	// A persistent session's queued messages (commands sent while the
	// device was away) arrive right after CONNACK, before SUBSCRIBE has
	// registered a callback: route them to the subscriptions known before
	// the connection, and by filter at delivery time for the others.
	opts.SetDefaultPublishHandler(func(cl mqtt.Client, m mqtt.Message) {
		l.mu.Lock()
		var to *subscription
		for _, s := range l.mu.subs {
			if topicMatches(s.filter, m.Topic()) {
				to = s
				break
			}
		}
		l.mu.Unlock()
		if to != nil {
			l.deliver(to)(cl, m)
		}
	})
	c.client = mqtt.NewClient(opts)
	l.mu.Lock()
	for _, s := range l.mu.subs {
		c.client.AddRoute(routeKey(s.filter), l.deliver(s))
	}
	l.mu.Unlock()
	tok := c.client.Connect()
	select {
	case <-tok.Done():
	case <-l.ctx.Done():
		c.client.Disconnect(0)
		return nil, ErrClosed
	}
	if err := tok.Error(); err != nil {
		return nil, classify(&l.cfg, err)
	}
	c.since = time.Now()
	if ct, ok := tok.(*mqtt.ConnectToken); ok && !l.cfg.CleanSession && !ct.SessionPresent() {
		c.forgotten = true
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.ConnectTimeout)
	defer cancel()
	var subErr error
	subscribed := map[*subscription]bool{}
	// pending lists the subscriptions registered and not yet made on c;
	// it is checked again, under the lock, right before c is published, so
	// a Subscribe racing with the connection is never left out.
	pending := func() []*subscription {
		var todo []*subscription
		for _, s := range l.mu.subs {
			if !subscribed[s] {
				todo = append(todo, s)
			}
		}
		return todo
	}
	// A filter the broker refuses (its ACL) stays refused on every
	// connection: it is logged and the connection serves the others. Any
	// other failure (no SUBACK in time, identifiers in use, the connection
	// lost) ends the attempt, and the next connection subscribes again: a
	// connection without one of its subscriptions would be up and deaf to
	// that filter, and with a clean session nothing else would make it.
	subscribeAll := func(todo []*subscription) error {
		for _, s := range todo {
			subscribed[s] = true
			err := l.subscribe(ctx, c, s)
			switch {
			case err == nil:
			case errors.Is(err, ErrACL):
				l.log.Error("link: subscription refused", "filter", s.filter, "err", err)
				subErr = errors.Join(subErr, err)
			default:
				c.client.Disconnect(0)
				return err
			}
		}
		return nil
	}
	l.mu.Lock()
	todo := pending()
	l.mu.Unlock()
	if err := subscribeAll(todo); err != nil {
		return nil, err
	}
	if l.hooks.OnConnect != nil {
		publish := func(topic string, qos byte, retained bool, payload []byte) error {
			tok := c.client.Publish(topic, qos, retained, payload)
			select {
			case <-tok.Done():
				return tok.Error()
			case <-c.down:
				return ErrNotConnected
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := l.hooks.OnConnect(ctx, publish); err != nil {
			c.client.Disconnect(0)
			return nil, fmt.Errorf("link: on connect: %w", err)
		}
	}
	b := l.birth()
	birth, _ := json.Marshal(Status{Schema: StatusSchema, State: "online", Fleet: l.cfg.Fleet, Device: l.cfg.Device, Time: time.Now().UTC().Format(time.RFC3339Nano), Birth: &b})
	bt := c.client.Publish(l.topics.Status(), 1, true, birth)
	select {
	case <-bt.Done():
	case <-c.down:
	case <-ctx.Done():
	}
	if err := bt.Error(); err != nil || !c.client.IsConnectionOpen() {
		c.client.Disconnect(0)
		return nil, fmt.Errorf("link: birth message: %w", errors.Join(err, ErrNotConnected))
	}
	l.mu.Lock()
	for todo := pending(); len(todo) > 0; todo = pending() {
		l.mu.Unlock()
		if err := subscribeAll(todo); err != nil {
			return nil, err
		}
		l.mu.Lock()
	}
	l.connects.Add(1)
	l.mu.conn = c
	l.mu.lastErr = subErr // a refused subscription stays visible
	close(l.mu.up)
	l.changedLocked()
	l.mu.Unlock()
	l.log.Info("link: connected", "broker", l.cfg.Broker, "client_id", l.cfg.ClientID)
	return c, nil
}

// routeKey is the key paho's Subscribe files a filter's route under: a
// shared subscription ($share/<group>/<filter>) or a queue ($queue/...)
// without its prefix. AddRoute must use the same key, or the message
// matches two routes and its handler runs twice: a fleet server answered
// every request twice after each reconnection (TestSharedOnceAfterReconnect).
func routeKey(filter string) string {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		if _, f, ok := strings.Cut(rest, "/"); ok {
			return f
		}
	}
	if rest, ok := strings.CutPrefix(filter, "$queue/"); ok {
		return rest
	}
	return filter
}

// goodbye publishes what the will would have said (a clean DISCONNECT
// makes the broker discard the will): the hook's will, if any, then the
// retained offline status; then it disconnects.
func (l *Link) goodbye(c *conn) {
	l.mu.Lock()
	l.mu.conn = nil
	l.mu.Unlock()
	deadline := time.NewTimer(l.cfg.ConnectTimeout)
	defer deadline.Stop()
	send := func(topic string, qos byte, retained bool, payload []byte) {
		tok := c.client.Publish(topic, qos, retained, payload)
		select {
		case <-tok.Done():
			if err := tok.Error(); err != nil {
				l.log.Warn("link: goodbye not published", "topic", topic, "err", err)
			}
		case <-c.down:
		case <-deadline.C:
		}
	}
	if w := c.will; w != nil {
		send(w.topic, w.qos, w.retained, w.payload)
	}
	bye, _ := json.Marshal(Status{Schema: StatusSchema, State: "offline", Fleet: l.cfg.Fleet, Device: l.cfg.Device, Reason: "shutdown", Time: time.Now().UTC().Format(time.RFC3339Nano)})
	send(l.topics.Status(), 1, true, bye)
	c.client.Disconnect(250)
}

// Close publishes the offline status, disconnects and joins every
// goroutine of the link. It is idempotent. Flush an Outbox before closing
// the link it sends through.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.cancel()
		l.mu.Unlock()
		l.wg.Wait()
	})
	return l.closeErr
}

// tlsConfig builds the TLS configuration from the files in cfg, or nil
// for a plain broker URL. Errors name the file and what is wrong with it.
func tlsConfig(cfg Config) (*tls.Config, error) {
	u, _ := url.Parse(cfg.Broker)
	if !tlsScheme(u.Scheme) {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if t.ServerName == "" {
		t.ServerName = u.Hostname()
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: ca_file: %w", ErrConfig, err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: ca_file %s holds no PEM certificate", ErrConfig, cfg.CAFile)
		}
	}
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: cert_file/key_file: %w", ErrConfig, err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// topicMatches reports whether topic matches the MQTT filter (+ one
// level, # the rest).
func topicMatches(filter, topic string) bool {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		_, filter, _ = strings.Cut(rest, "/") // a shared subscription's group
	}
	f, t := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, p := range f {
		switch {
		case p == "#":
			return true
		case i >= len(t):
			return false
		case p != "+" && p != t[i]:
			return false
		}
	}
	return len(f) == len(t)
}
