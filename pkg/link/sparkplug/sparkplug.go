// Package sparkplug publishes the device's telemetry as a Sparkplug B edge
// node (Eclipse Sparkplug 3.0.0), for factories whose SCADA/MES hosts
// speak it, over the device's one link.
//
// The device is the edge node spBv1.0/<group>/{NBIRTH,NDATA,NDEATH,NCMD}/<node>;
// each model it serves is a device of that node,
// spBv1.0/<group>/{DBIRTH,DDATA,DCMD}/<node>/<model>. NDEATH is the link's
// last will, and the link publishes it itself before a clean disconnect
// (which makes the broker discard the will); its bdSeq metric matches the
// NBIRTH of the same session and is incremented, 0–255 wrapping, with
// every connection attempt, and across restarts when Options.State keeps
// it. NBIRTH is the first message of each session (seq 0), followed by a
// DBIRTH per model the device knows; every later message takes the next
// seq, 0–255 wrapping, in the order the messages are published. Births carry every metric's name, alias and type; data messages
// carry aliases only. A host asks for a rebirth with the NCMD metric
// "Node Control/Rebirth" = true.
//
// Sparkplug data is live state, published at QoS 0 as the specification
// says: while the broker is away NDATA/DDATA are not sent (the JSON
// telemetry on edgeinfer/v1/... goes through the durable outbox instead).
package sparkplug

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	pb "github.com/edgeinfer/edgeinfer/pkg/link/sparkplug/sparkplugpb"
	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// Namespace is the Sparkplug B topic namespace.
const Namespace = "spBv1.0"

// RebirthMetric is the NCMD metric that asks for a rebirth.
const RebirthMetric = "Node Control/Rebirth"

// Config names the edge node.
type Config struct {
	// Group is the Sparkplug group id; Node the edge node id (the device).
	Group string `json:"group"`
	Node  string `json:"node"`
}

// Validate checks the ids are usable as topic levels.
func (c Config) Validate() error {
	for _, f := range []struct{ name, v string }{{"group", c.Group}, {"node", c.Node}} {
		if f.v == "" || strings.ContainsAny(f.v, "/+#") {
			return fmt.Errorf("sparkplug: bad config: %s %q must be non-empty without '/', '+' or '#'", f.name, f.v)
		}
	}
	return nil
}

// Node is the Sparkplug edge node. Create it before the link (its Hooks
// supply the will and the birth), then Start it on the link. It is safe
// for concurrent use.
type Node struct {
	cfg   Config
	opts  Options
	log   *slog.Logger
	l     *link.Link
	birth func() link.Birth // set by Hooks, before the link exists

	// mu is held from numbering a message to handing it to the client, so
	// messages leave in seq order and a rebirth (which restarts seq at 0)
	// never falls between a message's numbering and its publication.
	mu struct {
		sync.Mutex
		bdSeq     uint64 // of the latest connection attempt
		attempted bool
		seq       uint64 // the next message's seq
		aliases   map[string]uint64
		last      link.Snapshot
		haveLast  bool     // a telemetry snapshot has been published
		devices   []string // models born in this session
	}
}

// Options are a Node's optional settings.
type Options struct {
	// State keeps the node's bdSeq across restarts, in an owner bucket of
	// a pkg/store file (the agent passes its outbox store). Without it the
	// bdSeq starts at 0 on every run, which a host that saw the previous
	// run's session may take for that session.
	State *store.Store
	// Bucket is State's owner bucket; "" means "sparkplug.node".
	Bucket string
	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger
}

// NewNode returns an edge node whose bdSeq lives in memory only.
func NewNode(cfg Config) (*Node, error) { return NewNodeWith(cfg, Options{}) }

// NewNodeWith returns an edge node with options.
func NewNodeWith(cfg Config, opts Options) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Bucket == "" {
		opts.Bucket = "sparkplug.node"
	}
	n := &Node{cfg: cfg, opts: opts, log: opts.Logger}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	n.mu.aliases = map[string]uint64{}
	return n, nil
}

// Topic returns spBv1.0/<group>/<typ>/<node>[/<device>].
func (n *Node) Topic(typ, device string) string {
	t := Namespace + "/" + n.cfg.Group + "/" + typ + "/" + n.cfg.Node
	if device != "" {
		t += "/" + device
	}
	return t
}

// Hooks returns the link hooks that make NDEATH the will and publish the
// births on every connection; birth is the edgeinfer status birth, and
// also what the births say (SDK version, board, models and so DBIRTHs)
// until the first telemetry snapshot. Call it once, before opening the
// link.
func (n *Node) Hooks(birth func() link.Birth) link.Hooks {
	n.birth = birth
	return link.Hooks{Birth: birth, Will: n.will, OnConnect: n.onConnect}
}

// bdSeqKey is the node's key in the state bucket: one store may hold
// several nodes.
func (n *Node) bdSeqKey() []byte {
	return []byte("bdSeq/" + n.cfg.Group + "/" + n.cfg.Node)
}

// will is the NDEATH of the next connection attempt: a new bdSeq, one
// more than the previous attempt's (of this run or, with Options.State,
// of the previous run), recorded before the CONNECT so that a process
// killed after it never reuses the number.
func (n *Node) will() (string, []byte, byte, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	next := uint64(0)
	if n.mu.attempted {
		next = (n.mu.bdSeq + 1) % 256
	}
	if st := n.opts.State; st != nil {
		err := st.Update(context.Background(), n.opts.Bucket, func(tx *store.Tx) error {
			if v := tx.Get(n.bdSeqKey()); len(v) == 8 {
				next = (binary.BigEndian.Uint64(v) + 1) % 256
			}
			return tx.Put(n.bdSeqKey(), binary.BigEndian.AppendUint64(nil, next))
		})
		if err != nil {
			// The session still needs a will; the number may repeat one
			// of an earlier run, which a host copes with by its timestamp.
			n.log.Warn("sparkplug: bdSeq not recorded", "bdSeq", next, "err", err)
		}
	}
	n.mu.bdSeq, n.mu.attempted = next, true
	p := &pb.Payload{Timestamp: proto.Uint64(nowMS()), Metrics: []*pb.Payload_Metric{bdSeqMetric(n.mu.bdSeq)}}
	b, _ := proto.Marshal(p)
	return n.Topic("NDEATH", ""), b, 1, false
}

func bdSeqMetric(v uint64) *pb.Payload_Metric {
	return &pb.Payload_Metric{Name: proto.String("bdSeq"), Datatype: proto.Uint32(uint32(pb.DataType_Int64)),
		Timestamp: proto.Uint64(nowMS()), Value: &pb.Payload_Metric_LongValue{LongValue: v}}
}

// startSnapshot is what births say before any telemetry: the link's birth
// (SDK version, board, models). It calls birth outside n.mu (it reads the
// model store).
func (n *Node) startSnapshot() link.Snapshot {
	if n.birth == nil {
		return link.Snapshot{}
	}
	b := n.birth()
	return link.Snapshot{SDKVersion: b.SDKVersion, Board: b.Board, Models: b.Models}
}

// onConnect publishes NBIRTH (seq 0) and a DBIRTH per known model.
func (n *Node) onConnect(_ context.Context, publish func(string, byte, bool, []byte) error) error {
	start := n.startSnapshot()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.births(start) {
		if err := publish(m.topic, 0, false, m.payload); err != nil {
			return fmt.Errorf("sparkplug: birth: %w", err)
		}
	}
	return nil
}

type message struct {
	topic   string
	payload []byte
}

// births builds NBIRTH and every DBIRTH from the last snapshot, or from
// start before the first, starting a new seq run. n.mu is held.
func (n *Node) births(start link.Snapshot) []message {
	n.mu.seq = 0
	s := start
	if n.mu.haveLast {
		s = n.mu.last
	}
	node := append([]metric{{name: "bdSeq", typ: pb.DataType_Int64, v: n.mu.bdSeq}, {name: RebirthMetric, typ: pb.DataType_Boolean, v: false}}, nodeMetrics(s)...)
	out := []message{{n.Topic("NBIRTH", ""), n.payloadLocked("", node, true)}}
	n.mu.devices = n.mu.devices[:0]
	for _, model := range models(s) {
		out = append(out, message{n.Topic("DBIRTH", model), n.payloadLocked(model, deviceMetrics(s, model), true)})
		n.mu.devices = append(n.mu.devices, model)
	}
	return out
}

// payloadLocked encodes metrics with the next seq. Births name every
// metric and bind its alias; data messages send aliases only.
func (n *Node) payloadLocked(device string, ms []metric, birth bool) []byte {
	ts := nowMS()
	p := &pb.Payload{Timestamp: proto.Uint64(ts), Seq: proto.Uint64(n.mu.seq)}
	n.mu.seq = (n.mu.seq + 1) % 256
	for _, m := range ms {
		key := device + "\x00" + m.name
		alias, ok := n.mu.aliases[key]
		if !ok {
			alias = uint64(len(n.mu.aliases) + 1)
			n.mu.aliases[key] = alias
		}
		pm := &pb.Payload_Metric{Alias: proto.Uint64(alias), Timestamp: proto.Uint64(ts), Datatype: proto.Uint32(uint32(m.typ))}
		if birth {
			pm.Name = proto.String(m.name)
		}
		m.set(pm)
		p.Metrics = append(p.Metrics, pm)
	}
	b, _ := proto.Marshal(p)
	return b
}

// Start subscribes to the node's NCMD and DCMD topics on l (rebirth).
func (n *Node) Start(ctx context.Context, l *link.Link) error {
	n.l = l
	if err := l.Subscribe(ctx, n.Topic("NCMD", ""), 0, n.onCommand); err != nil {
		return err
	}
	return l.Subscribe(ctx, n.Topic("DCMD", "+"), 0, n.onCommand)
}

func (n *Node) onCommand(m link.Message) {
	var p pb.Payload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return
	}
	for _, pm := range p.Metrics {
		if pm.GetName() == RebirthMetric && pm.GetBooleanValue() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = n.Rebirth(ctx)
			cancel()
			return
		}
	}
}

// Rebirth publishes NBIRTH and the DBIRTHs again (same bdSeq, seq from 0).
func (n *Node) Rebirth(ctx context.Context) error {
	if n.l == nil {
		return errors.New("sparkplug: rebirth before Start")
	}
	start := n.startSnapshot()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.births(start) {
		if err := n.l.Publish(ctx, m.topic, 0, false, m.payload); err != nil {
			return fmt.Errorf("sparkplug: rebirth: %w", err)
		}
	}
	return nil
}

// Publish sends a telemetry snapshot: NDATA for the node, a DBIRTH for a
// model not yet born in this session, DDATA for the others. It fails with
// link.ErrNotConnected while the broker is away (the data is not kept).
func (n *Node) Publish(ctx context.Context, s link.Snapshot) error {
	if n.l == nil {
		return errors.New("sparkplug: publish before Start")
	}
	// Held until the messages are on the wire (see Node.mu): the seq a
	// message carries must be the next in the stream the host reads.
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.last, n.mu.haveLast = s, true
	msgs := []message{{n.Topic("NDATA", ""), n.payloadLocked("", nodeMetrics(s), false)}}
	for _, model := range models(s) {
		if slices.Contains(n.mu.devices, model) {
			msgs = append(msgs, message{n.Topic("DDATA", model), n.payloadLocked(model, deviceMetrics(s, model), false)})
		} else {
			msgs = append(msgs, message{n.Topic("DBIRTH", model), n.payloadLocked(model, deviceMetrics(s, model), true)})
			n.mu.devices = append(n.mu.devices, model)
		}
	}
	var errs []error
	for _, m := range msgs {
		if err := n.l.Publish(ctx, m.topic, 0, false, m.payload); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func nowMS() uint64 { return uint64(time.Now().UnixMilli()) }
