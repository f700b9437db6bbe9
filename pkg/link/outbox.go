package link

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// Class says how the outbox treats a message when it is full.
type Class uint8

const (
	// ClassTelemetry may be dropped, oldest first, to make room; drops
	// are counted and reported in the next telemetry.
	ClassTelemetry Class = 1
	// ClassStatus (update status, retained) and ClassEvent are never
	// dropped: when only they fill the outbox, Enqueue refuses new ones
	// with ErrOutboxFull.
	ClassStatus Class = 2
	ClassEvent  Class = 3
)

// OutboxConfig configures an Outbox. The zero value is usable.
type OutboxConfig struct {
	// Bucket is the store owner bucket; "" means "link.outbox".
	Bucket string `json:"bucket,omitempty"`
	// MaxBytes bounds the stored messages (topic + payload + 16 bytes of
	// framing each); 0 means 64 MiB.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// Window is W, the most messages published and not yet acknowledged;
	// 0 means 256. It bounds the duplicates a reconnection or a crash can
	// cause, and stays far below MQTT's 65,535 message ids.
	Window int `json:"window,omitempty"`
	// BufferBytes bounds the messages enqueued and not yet committed:
	// Enqueue waits beyond it; 0 means 4 MiB.
	BufferBytes int64 `json:"buffer_bytes,omitempty"`
	// Linger is how long an acknowledged message is kept in memory (at
	// most lingerBytes of them) to be sent again should the broker come
	// back without this client's session; 0 means 1 minute, negative
	// keeps none. See Outbox.
	Linger time.Duration `json:"linger,omitempty"`
	// Logger receives the outbox's logs; nil discards them.
	Logger *slog.Logger `json:"-"`
}

// OutboxStats are the outbox's counters.
type OutboxStats struct {
	Depth    int    `json:"depth"`     // messages stored and not yet acknowledged
	Bytes    int64  `json:"bytes"`     // their size as counted against MaxBytes
	InFlight int    `json:"in_flight"` // published, waiting for PUBACK
	Dropped  uint64 `json:"dropped"`   // telemetry messages dropped, ever (durable)
	Acked    uint64 `json:"acked"`     // acknowledged since Open
	Resent   uint64 `json:"resent"`    // published again on a new connection since Open
	NextSeq  uint64 `json:"next_seq"`  // the sequence number the next message gets
	Corrupt  uint64 `json:"corrupt"`   // undecodable records removed at Open
	// Republished counts acknowledged messages sent again because the
	// broker came back without the session (since Open).
	Republished uint64 `json:"republished"`
}

// Outbox is a durable queue of messages to the broker kept in an owner
// bucket of a pkg/store file. Every message gets the outbox's next
// sequence number, which the caller writes into its payload (receivers
// de-duplicate by device and seq, see Dedup). Messages are committed in
// groups — everything enqueued while the previous transaction was being
// fsync'd goes into the next one — so durability costs one fsync per
// group, not per message (BenchmarkOutbox measures it against paho's
// FileStore). At most Window messages are in flight; a message leaves the
// outbox only when its PUBACK arrives, and after a reconnection or a
// restart every unacknowledged message is sent again, so a receiver sees
// each message at least once and duplicates only from the in-flight
// window (and acknowledgements not yet committed when the process died).
//
// The byte bound's policy: when a message does not fit, the oldest
// telemetry not in flight is dropped (counted, durably, in
// OutboxStats.Dropped) until it fits; status and events are never
// dropped: with nothing left to drop, a telemetry message is dropped
// itself (counted) and a status or event is refused with ErrOutboxFull.
//
// A PUBACK means the broker has the message, not that a subscriber got
// it: a broker that restarts without its persistence (or expires the
// session) loses what it acknowledged and had not yet delivered, and its
// retained messages. The link notices (CONNACK without the session of a
// clean_session=false client), and the outbox then sends again the
// messages acknowledged in the last Config.Linger and the latest retained
// message of each topic, with their seqs, before anything else; receivers
// drop what they already had (TestRepublishWhenBrokerForgets).
//
// Outbox is safe for concurrent use.
type Outbox struct {
	st     *store.Store
	link   *Link
	cfg    OutboxConfig
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		next      uint64 // next sequence number to assign
		committed uint64 // every seq ≤ committed that exists is on disk
		buf       []record
		bufBytes  int64
		bytes     int64 // all stored + buffered records
		count     int
		tele      []teleEnt // telemetry in seq order (lazily pruned)
		cursor    uint64    // next committed seq to send
		inflight  map[uint64]flight
		resend    []uint64          // unacknowledged seqs of a lost connection
		again     []record          // acknowledged messages to send again (the broker forgot us)
		linger    []lingered        // acknowledged messages, oldest first
		lingerB   int64             // their bytes
		retained  map[string]record // the latest acknowledged retained message per topic
		republish uint64
		owed      bool                // the broker forgot us: republish on the next connection that lasts
		gone      map[uint64]struct{} // acked or dropped, delete pending
		deletes   []uint64
		dropped   uint64
		acked     uint64
		resent    uint64
		corrupt   uint64
		commitErr error
		commits   uint64        // finished commit attempts
		changed   chan struct{} // closed and replaced on every commit or ack
	}
	wake chan struct{} // to the committer

	closeOnce sync.Once
	closeErr  error
}

type record struct {
	seq      uint64
	class    Class
	retained bool
	topic    string
	payload  []byte
	dropped  bool
}

type teleEnt struct {
	seq  uint64
	size int64
}

type flight struct {
	c     *conn
	rec   *record // the message: its size, and what lingers once acknowledged
	again bool    // sent again from memory: no longer in the store
}

type lingered struct {
	rec record
	at  time.Time
}

// lingerBytes bounds the acknowledged messages kept in memory.
const lingerBytes = 1 << 20

const (
	recordVersion = 1
	recordHeader  = 5 // version, class, flags, topic length (2)
	recordCost    = 16
)

// Metadata keys: never 8 bytes long (the length of a seq key), and
// starting with '~' so that they sort after every seq key.
var (
	metaDropped = []byte("~dropped_total")
	metaNext    = []byte("~next_seq")
)

func (r *record) size() int64 { return int64(len(r.topic)+len(r.payload)) + recordCost }

func (r *record) encode() []byte {
	b := make([]byte, recordHeader, recordHeader+len(r.topic)+len(r.payload))
	b[0], b[1] = recordVersion, byte(r.class)
	if r.retained {
		b[2] = 1
	}
	binary.BigEndian.PutUint16(b[3:], uint16(len(r.topic)))
	return append(append(b, r.topic...), r.payload...)
}

// decodeRecord parses a stored record; payload aliases b.
func decodeRecord(seq uint64, b []byte) (record, error) {
	if len(b) < recordHeader || b[0] != recordVersion {
		return record{}, fmt.Errorf("%w: seq %d: bad header", ErrCorrupt, seq)
	}
	n := int(binary.BigEndian.Uint16(b[3:]))
	c := Class(b[1])
	if len(b) < recordHeader+n || c < ClassTelemetry || c > ClassEvent {
		return record{}, fmt.Errorf("%w: seq %d: bad class or topic length", ErrCorrupt, seq)
	}
	return record{seq: seq, class: c, retained: b[2]&1 != 0, topic: string(b[recordHeader : recordHeader+n]), payload: b[recordHeader+n:]}, nil
}

// OpenOutbox opens (or creates) the outbox in st and starts sending
// through l; it resumes with every message left unacknowledged by an
// earlier run. The store stays the caller's: close the outbox first.
func OpenOutbox(ctx context.Context, st *store.Store, l *Link, cfg OutboxConfig) (*Outbox, error) {
	if cfg.MaxBytes < 0 || cfg.Window < 0 || cfg.BufferBytes < 0 {
		return nil, fmt.Errorf("%w: outbox max_bytes, window and buffer_bytes must not be negative", ErrConfig)
	}
	if cfg.Bucket == "" {
		cfg.Bucket = "link.outbox"
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 64 << 20
	}
	if cfg.Window == 0 {
		cfg.Window = 256
	}
	if cfg.BufferBytes == 0 {
		cfg.BufferBytes = 4 << 20
	}
	if cfg.Linger == 0 {
		cfg.Linger = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	o := &Outbox{st: st, link: l, cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1)}
	o.mu.inflight = map[uint64]flight{}
	o.mu.gone = map[uint64]struct{}{}
	o.mu.retained = map[string]record{}
	o.mu.changed = make(chan struct{})
	if err := o.load(ctx); err != nil {
		return nil, err
	}
	o.ctx, o.cancel = context.WithCancel(context.Background())
	o.wg.Add(2)
	go o.commitLoop()
	go o.sendLoop()
	return o, nil
}

// load rebuilds the in-memory index from the bucket: sizes, telemetry
// order, the next sequence number and the drop counter. Undecodable
// records are removed (and counted) so they cannot block the queue.
func (o *Outbox) load(ctx context.Context) error {
	var bad []uint64
	first := uint64(0)
	err := o.st.View(ctx, o.cfg.Bucket, func(tx *store.Tx) error {
		if v := tx.Get(metaDropped); len(v) == 8 {
			o.mu.dropped = binary.BigEndian.Uint64(v)
		}
		if v := tx.Get(metaNext); len(v) == 8 {
			o.mu.next = binary.BigEndian.Uint64(v)
		}
		return tx.ForEach(nil, func(k, v []byte) (bool, error) {
			if len(k) != 8 {
				return true, nil
			}
			seq := binary.BigEndian.Uint64(k)
			r, err := decodeRecord(seq, v)
			if err != nil {
				bad = append(bad, seq)
				return true, nil
			}
			if first == 0 {
				first = seq
			}
			sz := r.size()
			o.mu.bytes += sz
			o.mu.count++
			if r.class == ClassTelemetry {
				o.mu.tele = append(o.mu.tele, teleEnt{seq, sz})
			}
			o.mu.next = max(o.mu.next, seq+1)
			return true, nil
		})
	})
	if err != nil {
		return fmt.Errorf("link: open outbox: %w", err)
	}
	o.mu.next = max(o.mu.next, 1)
	o.mu.committed = o.mu.next - 1
	o.mu.cursor = max(first, 1)
	if first == 0 {
		o.mu.cursor = o.mu.next
	}
	if len(bad) > 0 {
		o.log.Error("link: outbox records do not decode; removed", "count", len(bad), "first_seq", bad[0])
		o.mu.corrupt = uint64(len(bad))
		err := o.st.Update(ctx, o.cfg.Bucket, func(tx *store.Tx) error {
			for _, s := range bad {
				if err := tx.Delete(store.SeqKey(s)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("link: open outbox: remove corrupt records: %w", err)
		}
	}
	return nil
}

// Enqueue adds a message for topic (QoS 1; retained when class is
// ClassStatus). build receives the message's sequence number and returns
// the payload, which must carry it. Enqueue returns once the message is
// queued for the next group commit — call Sync to wait until it is on
// disk — and waits only while BufferBytes of messages await their commit.
// It returns the sequence number. A telemetry message dropped at once
// because the outbox is full of status and events returns ErrOutboxFull,
// and is counted.
func (o *Outbox) Enqueue(ctx context.Context, topic string, class Class, build func(seq uint64) []byte) (uint64, error) {
	if class < ClassTelemetry || class > ClassEvent {
		return 0, fmt.Errorf("link: enqueue %s: unknown class %d", topic, class)
	}
	if len(topic) > 0xffff {
		return 0, fmt.Errorf("link: enqueue: topic of %d bytes is too long", len(topic))
	}
	o.mu.Lock()
	for o.mu.bufBytes >= o.cfg.BufferBytes {
		ch := o.mu.changed
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("link: enqueue %s: %w", topic, ctx.Err())
		case <-o.ctx.Done():
			return 0, ErrClosed
		}
		o.mu.Lock()
	}
	defer o.mu.Unlock()
	if o.ctx.Err() != nil {
		return 0, ErrClosed
	}
	seq := o.mu.next
	r := record{seq: seq, class: class, retained: class == ClassStatus, topic: topic, payload: build(seq)}
	sz := r.size()
	if sz > o.cfg.MaxBytes {
		return 0, fmt.Errorf("%w: message of %d bytes exceeds max_bytes %d", ErrOutboxFull, sz, o.cfg.MaxBytes)
	}
	for o.mu.bytes+sz > o.cfg.MaxBytes {
		if o.dropOldestTelemetryLocked() {
			continue
		}
		if class == ClassTelemetry {
			o.mu.dropped++
			o.mu.next++ // the seq was written into a payload: never reuse it
			return 0, fmt.Errorf("%w: telemetry dropped (the outbox holds %d bytes of status and events)", ErrOutboxFull, o.mu.bytes)
		}
		return 0, fmt.Errorf("%w: %s refused: %d bytes of status and events await the broker (max_bytes %d)", ErrOutboxFull, topic, o.mu.bytes, o.cfg.MaxBytes)
	}
	o.mu.next++
	o.mu.buf = append(o.mu.buf, r)
	o.mu.bufBytes += sz
	o.mu.bytes += sz
	o.mu.count++
	if class == ClassTelemetry {
		o.mu.tele = append(o.mu.tele, teleEnt{seq, sz})
	}
	o.poke()
	return seq, nil
}

// dropOldestTelemetryLocked drops the oldest telemetry message that is
// still stored and not in flight; false when there is none.
func (o *Outbox) dropOldestTelemetryLocked() bool {
	for i := 0; i < len(o.mu.tele); i++ {
		e := o.mu.tele[i]
		_, gone := o.mu.gone[e.seq]
		_, flying := o.mu.inflight[e.seq]
		if gone || (e.seq < o.mu.cursor && !flying && !o.pendingResendLocked(e.seq)) {
			// acknowledged already: prune and go on
			o.mu.tele = slices.Delete(o.mu.tele, i, i+1)
			i--
			continue
		}
		if flying {
			continue // on the wire: its PUBACK may be coming
		}
		o.mu.tele = slices.Delete(o.mu.tele, i, i+1)
		o.mu.dropped++
		o.mu.bytes -= e.size
		o.mu.count--
		// Not yet taken by the committer: it never reaches the disk.
		// Otherwise (on disk, or in the transaction being written) the
		// next transaction deletes it.
		if j, found := slices.BinarySearchFunc(o.mu.buf, e.seq, func(r record, s uint64) int { return cmp.Compare(r.seq, s) }); found {
			o.mu.buf[j].dropped = true
			o.mu.bufBytes -= e.size
		} else {
			o.mu.gone[e.seq] = struct{}{}
			o.mu.deletes = append(o.mu.deletes, e.seq)
		}
		return true
	}
	return false
}

func (o *Outbox) pendingResendLocked(seq uint64) bool { return slices.Contains(o.mu.resend, seq) }

func (o *Outbox) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// changedLocked wakes everyone waiting for a commit or an acknowledgement.
func (o *Outbox) changedLocked() {
	close(o.mu.changed)
	o.mu.changed = make(chan struct{})
}

// Changed returns a channel closed at the next commit or acknowledgement
// (when Stats may have changed), for a caller to wait on instead of
// polling Stats.
func (o *Outbox) Changed() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.changed
}

// Sync waits until every message enqueued before the call is on disk.
func (o *Outbox) Sync(ctx context.Context) error {
	o.mu.Lock()
	target, commits := o.mu.next-1, o.mu.commits
	for o.mu.committed < target {
		if o.mu.commits > commits && o.mu.commitErr != nil {
			err := o.mu.commitErr
			o.mu.Unlock()
			return fmt.Errorf("link: outbox sync: %w", err)
		}
		ch := o.mu.changed
		o.mu.Unlock()
		o.poke()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("link: outbox sync: %w", ctx.Err())
		case <-o.ctx.Done():
			return ErrClosed
		}
		o.mu.Lock()
	}
	o.mu.Unlock()
	return nil
}

// Flush waits until the outbox is empty (every message acknowledged) or
// ctx ends; then it says how many messages remain.
func (o *Outbox) Flush(ctx context.Context) error {
	for {
		o.mu.Lock()
		n, ch := o.mu.count, o.mu.changed
		o.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("link: outbox flush: %d messages still unacknowledged: %w", n, ctx.Err())
		case <-o.ctx.Done():
			return ErrClosed
		}
	}
}

// Stats returns the outbox's counters.
func (o *Outbox) Stats() OutboxStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	return OutboxStats{Depth: o.mu.count, Bytes: o.mu.bytes, InFlight: len(o.mu.inflight), Dropped: o.mu.dropped,
		Acked: o.mu.acked, Resent: o.mu.resent, NextSeq: o.mu.next, Corrupt: o.mu.corrupt, Republished: o.mu.republish}
}

// commitLoop is the group committer: it writes everything enqueued,
// acknowledged or dropped since the last transaction in one transaction.
func (o *Outbox) commitLoop() {
	defer o.wg.Done()
	for {
		select {
		case <-o.wake:
		case <-o.ctx.Done():
			o.commit() // what was enqueued before Close
			return
		}
		if err := o.commit(); err != nil {
			o.log.Error("link: outbox commit failed; retrying", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
				o.poke()
			case <-o.ctx.Done():
			}
		}
	}
}

func (o *Outbox) commit() error {
	o.mu.Lock()
	buf, deletes := o.mu.buf, o.mu.deletes
	dropped, next := o.mu.dropped, o.mu.next
	o.mu.buf, o.mu.deletes, o.mu.bufBytes = nil, nil, 0
	o.mu.Unlock()
	if len(buf) == 0 && len(deletes) == 0 {
		o.mu.Lock()
		if o.mu.committed < next-1 { // only telemetry dropped on arrival
			o.mu.committed = next - 1
			o.changedLocked()
		}
		o.mu.Unlock()
		return nil
	}
	err := o.st.Update(context.Background(), o.cfg.Bucket, func(tx *store.Tx) error {
		for i := range buf {
			if buf[i].dropped {
				continue
			}
			if err := tx.Put(store.SeqKey(buf[i].seq), buf[i].encode()); err != nil {
				return err
			}
		}
		for _, s := range deletes {
			if err := tx.Delete(store.SeqKey(s)); err != nil {
				return err
			}
		}
		if err := tx.Put(metaDropped, binary.BigEndian.AppendUint64(nil, dropped)); err != nil {
			return err
		}
		return tx.Put(metaNext, binary.BigEndian.AppendUint64(nil, next))
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mu.commits++
	o.mu.commitErr = err
	if err != nil {
		// put the batch back in front of what came meanwhile
		for i := range buf {
			if !buf[i].dropped {
				o.mu.bufBytes += buf[i].size()
			}
		}
		o.mu.buf = append(buf, o.mu.buf...)
		o.mu.deletes = append(deletes, o.mu.deletes...)
		o.changedLocked()
		return err
	}
	// everything numbered before the snapshot is on disk now, or was
	// dropped
	o.mu.committed = max(o.mu.committed, next-1)
	for _, s := range deletes {
		delete(o.mu.gone, s)
	}
	o.changedLocked()
	return nil
}

// sendLoop publishes committed messages, at most Window in flight, and
// starts over with the unacknowledged ones on every new connection.
func (o *Outbox) sendLoop() {
	defer o.wg.Done()
	var last *conn
	var acks sync.WaitGroup
	defer acks.Wait()
	for {
		c, up := o.link.current()
		if c == nil {
			select {
			case <-up:
				continue
			case <-o.ctx.Done():
				return
			}
		}
		o.mu.Lock()
		if c != last {
			// a new connection: what was in flight on the old one goes again
			for s, f := range o.mu.inflight {
				if f.again {
					o.mu.again = append(o.mu.again, *f.rec)
				} else {
					o.mu.resend = append(o.mu.resend, s)
				}
			}
			o.mu.resent += uint64(len(o.mu.inflight))
			clear(o.mu.inflight)
			slices.Sort(o.mu.resend)
			sortBySeq(o.mu.again)
			if c.forgotten {
				o.mu.owed = true
			}
			if o.mu.owed {
				o.wg.Add(1)
				go o.republishSoon(c)
			}
			last = c
		}
		room := o.cfg.Window - len(o.mu.inflight)
		ch := o.mu.changed
		o.mu.Unlock()
		if room > 0 {
			recs, err := o.nextBatch(room)
			if err != nil {
				o.log.Error("link: outbox read failed", "err", err)
			}
			for _, r := range recs {
				o.publish(c, r, &acks)
			}
			if len(recs) > 0 {
				continue
			}
		}
		select {
		case <-ch:
		case <-c.down:
		case <-o.ctx.Done():
			return
		}
	}
}

// republishDelay is how long the outbox waits, on a connection to a
// broker that forgot its session, before it sends again: the broker has
// forgotten every client's session, and a subscriber needs a moment to
// come back and subscribe again (what reaches the broker before then is
// delivered to nobody).
const republishDelay = time.Second

// republishSoon republishes after republishDelay, if c is still up.
func (o *Outbox) republishSoon(c *conn) {
	defer o.wg.Done()
	t := time.NewTimer(republishDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.down:
		return
	case <-o.ctx.Done():
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.mu.owed {
		return
	}
	o.mu.owed = false
	o.republishLocked()
	o.changedLocked()
}

// republishLocked queues again what a broker that forgot this client may
// have lost: the messages acknowledged within Linger, and the latest
// retained message of each topic, however old.
func (o *Outbox) republishLocked() {
	o.pruneLingerLocked(time.Now())
	seen := map[uint64]bool{}
	for _, r := range o.mu.again {
		seen[r.seq] = true
	}
	for _, l := range o.mu.linger {
		if !seen[l.rec.seq] {
			seen[l.rec.seq] = true
			o.mu.again = append(o.mu.again, l.rec)
			o.mu.republish++
		}
	}
	for _, r := range o.mu.retained {
		if !seen[r.seq] {
			o.mu.again = append(o.mu.again, r)
			o.mu.republish++
		}
	}
	o.mu.linger, o.mu.lingerB = nil, 0
	sortBySeq(o.mu.again)
	if len(o.mu.again) > 0 {
		o.log.Info("link: the broker came back without this session; sending recent messages again", "messages", len(o.mu.again))
	}
}

// lingerLocked keeps an acknowledged message for republishLocked.
func (o *Outbox) lingerLocked(r *record) {
	if r == nil || o.cfg.Linger < 0 {
		return
	}
	if r.retained {
		if cur, ok := o.mu.retained[r.topic]; !ok || cur.seq < r.seq {
			o.mu.retained[r.topic] = *r
		}
	}
	now := time.Now()
	o.mu.linger = append(o.mu.linger, lingered{rec: *r, at: now})
	o.mu.lingerB += r.size()
	o.pruneLingerLocked(now)
}

func (o *Outbox) pruneLingerLocked(now time.Time) {
	i := 0
	for ; i < len(o.mu.linger); i++ {
		if o.mu.lingerB <= lingerBytes && now.Sub(o.mu.linger[i].at) <= o.cfg.Linger {
			break
		}
		o.mu.lingerB -= o.mu.linger[i].rec.size()
	}
	// Reslice rather than move the rest down on every acknowledgement
	// (this runs per PUBACK); the pruned payloads are let go now, the
	// array at append's next growth.
	clear(o.mu.linger[:i])
	o.mu.linger = o.mu.linger[i:]
}

func sortBySeq(rs []record) {
	slices.SortFunc(rs, func(a, b record) int { return cmp.Compare(a.seq, b.seq) })
}

// nextBatch reads up to n messages to send: again first, then resends, then committed
// messages from the cursor. It marks them in flight on the current
// connection before they are published, so an acknowledgement cannot
// arrive for a message not yet marked.
func (o *Outbox) nextBatch(n int) ([]record, error) {
	o.mu.Lock()
	if len(o.mu.again) > 0 {
		k := min(n, len(o.mu.again))
		out := slices.Clone(o.mu.again[:k])
		o.mu.again = o.mu.again[k:]
		for i := range out {
			o.mu.inflight[out[i].seq] = flight{rec: &out[i], again: true}
		}
		o.mu.Unlock()
		return out, nil
	}
	resend := o.mu.resend[:min(n, len(o.mu.resend))]
	o.mu.resend = o.mu.resend[len(resend):]
	from, to := o.mu.cursor, o.mu.committed
	o.mu.Unlock()
	if len(resend) == 0 && from > to {
		return nil, nil
	}
	var out []record
	err := o.st.View(context.Background(), o.cfg.Bucket, func(tx *store.Tx) error {
		for _, s := range resend {
			if v := tx.Get(store.SeqKey(s)); v != nil {
				if r, err := decodeRecord(s, v); err == nil {
					r.payload = bytes.Clone(r.payload)
					out = append(out, r)
				}
			}
		}
		if len(out) >= n || from > to {
			return nil
		}
		return tx.ForEach(store.SeqKey(from), func(k, v []byte) (bool, error) {
			if len(k) != 8 {
				return false, nil
			}
			s := binary.BigEndian.Uint64(k)
			if s > to {
				return false, nil
			}
			from = s + 1
			r, err := decodeRecord(s, v)
			if err != nil {
				return true, nil
			}
			r.payload = bytes.Clone(r.payload)
			out = append(out, r)
			return len(out) < n, nil
		})
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(out) < n && err == nil {
		from = max(from, to+1) // nothing else committed below to
	}
	o.mu.cursor = max(o.mu.cursor, from)
	kept := out[:0]
	for _, r := range out {
		if _, gone := o.mu.gone[r.seq]; gone {
			continue // dropped or acknowledged meanwhile
		}
		kept = append(kept, r)
	}
	for i := range kept {
		o.mu.inflight[kept[i].seq] = flight{rec: &kept[i]}
	}
	return kept, err
}

func (o *Outbox) publish(c *conn, r record, acks *sync.WaitGroup) {
	o.mu.Lock()
	f := o.mu.inflight[r.seq]
	f.c = c
	o.mu.inflight[r.seq] = f
	o.mu.Unlock()
	tok := c.client.Publish(r.topic, 1, r.retained, r.payload)
	acks.Add(1)
	go func() {
		defer acks.Done()
		select {
		case <-tok.Done():
			if tok.Error() == nil {
				o.ack(c, r.seq)
			}
		case <-c.down: // sent again on the next connection
		case <-o.ctx.Done():
		}
	}()
}

// ack removes an acknowledged message: from memory now, from disk in the
// next group commit.
func (o *Outbox) ack(c *conn, seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f, ok := o.mu.inflight[seq]
	if !ok || f.c != c {
		return
	}
	delete(o.mu.inflight, seq)
	o.lingerLocked(f.rec)
	if f.again { // no longer in the store: nothing to delete or count
		o.changedLocked()
		o.poke()
		return
	}
	o.mu.gone[seq] = struct{}{}
	o.mu.deletes = append(o.mu.deletes, seq)
	o.mu.bytes -= f.rec.size()
	o.mu.count--
	o.mu.acked++
	if len(o.mu.tele) > 0 && o.mu.tele[0].seq == seq {
		o.mu.tele = o.mu.tele[1:]
	}
	o.changedLocked()
	o.poke()
}

// Close stops sending, commits what was enqueued and acknowledged, and
// joins the outbox's goroutines. Messages not yet acknowledged stay on
// disk for the next Open. It is idempotent; it does not close the store.
func (o *Outbox) Close() error {
	o.closeOnce.Do(func() {
		o.cancel()
		o.wg.Wait()
		o.mu.Lock()
		o.closeErr = o.mu.commitErr
		left := len(o.mu.buf)
		o.mu.Unlock()
		if o.closeErr != nil || left > 0 {
			o.closeErr = errors.Join(fmt.Errorf("link: close outbox: %d messages not committed", left), o.closeErr)
		}
	})
	return o.closeErr
}

// SeqString formats a sequence number for a payload.
func SeqString(seq uint64) string { return strconv.FormatUint(seq, 10) }
