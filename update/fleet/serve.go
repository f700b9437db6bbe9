package fleet

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/edgeinfer/edgeinfer/update/wire"
	"log/slog"
	"maps"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/update"
)

// ServeConfig configures one fleet serve instance. It is plain data; zero
// values are documented.
type ServeConfig struct {
	// Broker, Fleet and the credentials are the instance's MQTT
	// connection (link.Config's fields of the same names).
	Broker   string `json:"broker"`
	Fleet    string `json:"fleet"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	CAFile   string `json:"ca_file,omitempty"`
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// Instance names this instance (its client is _serve-<instance>);
	// "" draws a random one. Instances must have distinct names.
	Instance string `json:"instance,omitempty"`
	// Repo is the repository directory (fleet keygen/publish): its files
	// are what the instance serves.
	Repo string `json:"repo"`
	// Keys are directories of signing keys. With the director's keys the
	// instance may lead: run rollouts and sign the director's assignments
	// (and refresh timestamps). Without, it only serves.
	Keys []string `json:"keys,omitempty"`
	// Group is the shared-subscription group of the request topics; ""
	// means "edgeinfer-serve". Instances of one group share the requests.
	Group string `json:"group,omitempty"`
	// Workers answer requests concurrently; 0 means 8.
	Workers int `json:"workers,omitempty"`
	// Tick is how often the leader re-evaluates rollouts; 0 means 1 s.
	Tick time.Duration `json:"tick,omitempty"`
	// TimestampEvery is how often the leader re-signs the timestamps; 0
	// means 6 h (a quarter of the default expiry).
	TimestampEvery time.Duration `json:"timestamp_every,omitempty"`
	// BulkURL is the static host (HTTPS: nginx, object storage, a CDN)
	// serving Repo's files. The leader retains it on wire.BulkTopic, and
	// devices fetch metadata and chunks from it, the request topics only
	// when it fails: the broker carries control only. "": the devices
	// fetch everything over the broker (small fleets, isolated sites).
	BulkURL string       `json:"bulk_url,omitempty"`
	Logger  *slog.Logger `json:"-"`
}

// Validate reports a bad field by name.
func (c ServeConfig) Validate() error {
	switch {
	case c.Repo == "":
		return fmt.Errorf("%w: repo: the repository directory is required", ErrServe)
	case c.Workers < 0 || c.Tick < 0 || c.TimestampEvery < 0:
		return fmt.Errorf("%w: workers, tick and timestamp_every must not be negative", ErrServe)
	case strings.ContainsAny(c.Group, "/+#"):
		return fmt.Errorf("%w: group %q must be one topic level", ErrServe, c.Group)
	case strings.ContainsAny(c.Instance, "/+#"):
		return fmt.Errorf("%w: instance %q must be one topic level", ErrServe, c.Instance)
	case c.BulkURL != "" && !strings.HasPrefix(c.BulkURL, "https://") && !strings.HasPrefix(c.BulkURL, "http://"):
		return fmt.Errorf("%w: bulk_url %q: want the https:// base URL of a static host serving the repository", ErrServe, c.BulkURL)
	}
	return c.linkConfig().Validate()
}

func (c ServeConfig) linkConfig() link.Config {
	return link.Config{Broker: c.Broker, Fleet: c.Fleet, Device: instancePrefix + c.Instance, Username: c.Username,
		Password: c.Password, CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile,
		CleanSession: true, QueueLen: fleetQueue, Logger: c.Logger}
}

// fleetQueue bounds a fleet-side client's handler queues: a subscription
// gets the retained records of every device at once (two a device), and
// a queue holds memory only for what waits in it (pkg/link's msgQueue).
const fleetQueue = 1 << 21

// ServeStats counts what an instance did.
type ServeStats struct {
	MetaRequests uint64 `json:"meta_requests"`
	// ChunkRequests counts the requests on the chunk topic, whole chunks
	// and pieces alike: each piece is a request of its own (a device
	// under a bandwidth cap asks for a chunk in pieces of a quarter
	// second of its cap, so a 1 MiB chunk at 64 KB/s is 64 requests).
	ChunkRequests uint64 `json:"chunk_requests"`
	// ChunkPieces counts the ChunkRequests that asked for a byte range
	// of a chunk (a piece) rather than the whole chunk.
	ChunkPieces uint64 `json:"chunk_pieces"`
	// ChunkBytes counts the chunk bytes actually sent: a piece's bytes,
	// not its chunk's size.
	ChunkBytes    uint64 `json:"chunk_bytes"`
	ResponseBytes uint64 `json:"response_bytes"`
	// Failed counts requests whose device did not get what it asked:
	// answered with an error status (a missing chunk, a bad request, a
	// repository read that failed), or an answer that could not be sent.
	Failed uint64 `json:"failed"`
	// Failures counts Failed by reason ("chunk not found", "bad metadata
	// request", "answer not sent", ...).
	Failures map[string]uint64 `json:"failures,omitempty"`
	// LastFailures are the latest failures, oldest first (at most
	// lastFailures), with the device, what it asked and the error.
	LastFailures []ServeFailure `json:"last_failures,omitempty"`
	// RootProbes are requests for the next version of a repository's
	// root that the repository does not have: how a device's TUF client
	// learns it holds the newest root (one per repository at every
	// check). They are answered "not found" and are no failure.
	RootProbes uint64 `json:"root_probes"`
	Leader     bool   `json:"leader"`
	// Claims counts the leadership claims this instance made (leader.go):
	// one an election, more when claims collided or the lead was lost.
	Claims         uint64 `json:"claims"`
	DirectorWrites uint64 `json:"director_writes"`
	Nudges         uint64 `json:"nudges"`
	Decisions      uint64 `json:"decisions"`
	// DecisionTime is the leader's last pass over every rollout (view,
	// decisions, director), excluding publishing.
	DecisionTime time.Duration `json:"decision_ns"`
	// Devices is how many devices the view holds, and HeapLiveBytes the
	// process's live Go heap after its last collection: their ratio is
	// fleet serve's memory a device (SCALE.md), without the collector's
	// headroom and the runtime's own that peak RSS adds.
	Devices       int    `json:"devices"`
	HeapLiveBytes uint64 `json:"go_heap_live_bytes"`
	// Connects counts the instance's connections to the broker (each
	// one subscribes again: its session is clean), HandlerDrops the
	// messages its handler queues had no room for, and LinkError the
	// link's last connection or subscription error ("" if none).
	Connects     uint64 `json:"connects"`
	HandlerDrops uint64 `json:"handler_drops"`
	LinkError    string `json:"link_error,omitempty"`
}

// ServeFailure is one request fleet serve failed.
type ServeFailure struct {
	Time    time.Time `json:"time"`
	Device  string    `json:"device,omitempty"`
	Request string    `json:"request,omitempty"` // "image/timestamp.json", "chunk <sha256>"
	Reason  string    `json:"reason"`
	Error   string    `json:"error,omitempty"`
}

// lastFailures is how many failures ServeStats keeps in full.
const lastFailures = 8

// Server is one fleet serve instance: it answers the devices' metadata
// and chunk requests from the repository directory (shared with the other
// instances of its group through $share/<group>/...), keeps a View from
// the devices' retained topics and telemetry, and — when it holds the
// leadership claim (leader.go), which only instances with the director's
// keys make — advances rollouts and signs the director's assignments. It holds
// nothing another instance cannot rebuild from the broker and the
// repository. Safe for concurrent use; Close is idempotent.
type Server struct {
	cfg  ServeConfig
	id   string
	l    *link.Link
	view *View
	src  update.FileSource
	log  *slog.Logger
	jobs chan link.Message

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	cerr   error

	meta, chunks, pieces, chunkBytes, resBytes, failed, rootProbes, dirWrites, nudges, decisions atomic.Uint64
	leader                                                                                       atomic.Bool
	decisionNS                                                                                   atomic.Int64
	failMu                                                                                       sync.Mutex
	failures                                                                                     map[string]uint64
	lastFails                                                                                    []ServeFailure
	lastStamp                                                                                    time.Time
	bulkAt                                                                                       uint64 // the connection the bulk URL was retained on
	leadMu                                                                                       sync.Mutex
	leadChanged                                                                                  chan struct{} // closed when leader flips; nil until LeaderChanged
	// nudged is when the leader last sent each device the check command:
	// a device assigned and still not updating is nudged again after
	// renudge (a lost command, or one sent by an instance that died).
	// Losing this map loses nothing: a new leader nudges again. Unix ns,
	// not time.Time: in the last wave every device is in it, and an 8-byte
	// value instead of a 24-byte one makes the map's slots 24 bytes, not 40.
	nudged map[string]int64
	// claim is the leadership session while this instance leads; only
	// the lead loop (and Close, after it) touches it.
	claim *claim
	// vacantAt is when the lead loop first found the lead vacant since it
	// last saw it held (zero: held, or not looked); only the lead loop
	// touches it.
	vacantAt time.Time
	claims   atomic.Uint64 // claims this instance made (ServeStats.Claims)
	// signed is, by model, the fingerprint of the assignments this
	// leader last signed (reset when it takes the lead).
	signed map[string][32]byte
}

// fingerprint is a digest of assignments (version -> devices, each list
// in any order).
func fingerprint(a map[string][]string) [32]byte {
	h := sha256.New()
	for _, v := range slices.Sorted(maps.Keys(a)) {
		ds := sortedSet(a[v]) // Assignments' lists are: no copy then
		fmt.Fprintf(h, "%s\x00%d\x00", v, len(ds))
		for _, d := range ds {
			h.Write([]byte(d))
			h.Write([]byte{0})
		}
	}
	return [32]byte(h.Sum(nil))
}

// renudge is how long an assigned device may stay idle before it is sent
// the check command again.
const renudge = 30 * time.Second

// Serve starts an instance: it connects, subscribes and serves until
// Close.
func Serve(ctx context.Context, cfg ServeConfig) (*Server, error) {
	if cfg.Instance == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.Instance = hex.EncodeToString(b[:])
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Group == "" {
		cfg.Group = "edgeinfer-serve"
	}
	cfg.Workers = cmp.Or(cfg.Workers, 8)
	if cfg.Tick == 0 {
		cfg.Tick = time.Second
	}
	if cfg.TimestampEvery == 0 {
		cfg.TimestampEvery = 6 * time.Hour
	}
	s := &Server{cfg: cfg, id: cfg.Instance, view: NewView(cfg.Fleet), src: update.FileSource{Dir: cfg.Repo},
		log: cfg.Logger, jobs: make(chan link.Message, 4*cfg.Workers), lastStamp: time.Now(), nudged: map[string]int64{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	l, err := link.Open(ctx, cfg.linkConfig(), nil)
	if err != nil {
		return nil, err
	}
	s.l = l
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for _, f := range s.view.Filters() {
		if err := l.Subscribe(ctx, f, 1, s.ingest); err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	base := link.Root + "/" + cfg.Fleet + "/+/req/"
	for _, t := range []string{update.TopicMeta, update.TopicChunk} {
		f := "$share/" + cfg.Group + "/" + base + wire.RequestName(t) + "/+"
		if err := l.Subscribe(ctx, f, 1, s.enqueue); err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	for range cfg.Workers {
		s.wg.Add(1)
		go s.worker()
	}
	s.wg.Add(1)
	go s.leadLoop()
	return s, nil
}

// Instance is this instance's name.
func (s *Server) Instance() string { return s.id }

// View is the instance's picture of the fleet.
func (s *Server) View() *View { return s.view }

// WaitConnected waits for the broker connection.
func (s *Server) WaitConnected(ctx context.Context) error { return s.l.WaitConnected(ctx) }

// LeaderChanged returns a channel closed the next time this instance takes
// or gives up the lead (Stats().Leader changes).
func (s *Server) LeaderChanged() <-chan struct{} {
	s.leadMu.Lock()
	defer s.leadMu.Unlock()
	if s.leadChanged == nil {
		s.leadChanged = make(chan struct{})
	}
	return s.leadChanged
}

// Stats returns the instance's counters.
func (s *Server) Stats() ServeStats {
	st := ServeStats{MetaRequests: s.meta.Load(), ChunkRequests: s.chunks.Load(), ChunkPieces: s.pieces.Load(), ChunkBytes: s.chunkBytes.Load(),
		ResponseBytes: s.resBytes.Load(), RootProbes: s.rootProbes.Load(), Leader: s.leader.Load(), Claims: s.claims.Load(), DirectorWrites: s.dirWrites.Load(),
		Nudges: s.nudges.Load(), Decisions: s.decisions.Load(), DecisionTime: time.Duration(s.decisionNS.Load()),
		Devices: s.view.Len(), HeapLiveBytes: heapLive()}
	ls := s.l.Stats()
	st.Connects, st.HandlerDrops, st.LinkError = ls.Connects, ls.HandlerDrops, ls.LastError
	s.failMu.Lock()
	defer s.failMu.Unlock()
	st.Failed = s.failed.Load() // under failMu: it agrees with Failures
	if len(s.failures) > 0 {
		st.Failures = maps.Clone(s.failures)
		st.LastFailures = slices.Clone(s.lastFails)
	}
	return st
}

// heapLive is the Go heap's live bytes as of the last collection.
func heapLive() uint64 {
	m := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return m[0].Value.Uint64()
}

// fail records a failed request under its reason.
func (s *Server) fail(device, request, reason string, err error) {
	f := ServeFailure{Time: time.Now().UTC(), Device: device, Request: request, Reason: reason}
	if err != nil {
		f.Error = err.Error()
	}
	s.failMu.Lock()
	defer s.failMu.Unlock()
	s.failed.Add(1)
	if s.failures == nil {
		s.failures = map[string]uint64{}
	}
	s.failures[reason]++
	if len(s.lastFails) == lastFailures {
		s.lastFails = slices.Delete(s.lastFails, 0, 1)
	}
	s.lastFails = append(s.lastFails, f)
	s.log.Debug("fleet: request failed", "device", device, "request", request, "reason", reason, "err", err)
}

// failureReason names why a request failed, from a small fixed set (the
// keys of ServeStats.Failures).
func failureReason(topic string, err error) string {
	kind := "metadata"
	if topic == update.TopicChunk {
		kind = "chunk"
	}
	switch {
	case errors.Is(err, update.ErrNotFound):
		return kind + " not found"
	case errors.Is(err, update.ErrBadMetadata):
		return "bad " + kind + " request"
	case errors.Is(err, update.ErrTooLarge):
		return kind + " larger than asked"
	}
	return kind + " read failed"
}

// rootProbe says whether name is a repository's versioned root
// ("image/2.root.json"): what TUF asks for to learn of a rotation.
func rootProbe(name string) bool {
	repo, file, ok := strings.Cut(name, "/")
	if !ok || (repo != update.RepoImage && repo != update.RepoDirector) {
		return false
	}
	n, ok := strings.CutSuffix(file, ".root.json")
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Close stops leading and serving, publishes the instance offline and
// disconnects.
func (s *Server) Close() error {
	s.once.Do(func() {
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
		s.dropClaim() // its will marks the lead vacant at once
		if s.leader.Swap(false) {
			s.leadMu.Lock()
			if s.leadChanged != nil {
				close(s.leadChanged)
				s.leadChanged = nil
			}
			s.leadMu.Unlock()
		}
		s.cerr = s.l.Close()
	})
	return s.cerr
}

func (s *Server) ingest(m link.Message) {
	if err := s.view.Ingest(m.Topic, m.Payload, time.Now()); err != nil {
		s.log.Debug("fleet: message ignored", "topic", m.Topic, "err", err)
	}
}

func (s *Server) enqueue(m link.Message) {
	select {
	case s.jobs <- m:
	case <-s.ctx.Done():
	}
}

func (s *Server) worker() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case m := <-s.jobs:
			s.answer(m)
		}
	}
}

// answer serves one request: edgeinfer/v1/<fleet>/<device>/req/<name>/<id>
// is answered on .../<device>/res/<name>/<id>.
func (s *Server) answer(m link.Message) {
	res, name, ok := responseTopic(m.Topic)
	if !ok {
		s.fail("", "", "bad request topic", fmt.Errorf("%w: topic %q", ErrMessage, m.Topic))
		return
	}
	dev := strings.Split(m.Topic, "/")[3]
	var topic string
	switch name {
	case wire.RequestName(update.TopicMeta):
		topic = update.TopicMeta
		s.meta.Add(1)
	case wire.RequestName(update.TopicChunk):
		topic = update.TopicChunk
		s.chunks.Add(1)
	default:
		s.fail(dev, name, "unknown request", fmt.Errorf("%w: request %q (want %s or %s)", ErrMessage, name,
			wire.RequestName(update.TopicMeta), wire.RequestName(update.TopicChunk)))
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	a := update.AnswerRequest(ctx, s.src, topic, m.Payload)
	if a.Len > 0 {
		s.pieces.Add(1)
	}
	switch {
	case a.Err == nil:
		if topic == update.TopicChunk {
			s.chunkBytes.Add(uint64(len(a.Body) - 1))
		}
	case topic == update.TopicMeta && errors.Is(a.Err, update.ErrNotFound) && rootProbe(a.Name):
		// Not a failure: every check asks for the next root, and a
		// repository that was never rotated has none.
		s.rootProbes.Add(1)
	default:
		s.fail(dev, a.Name, failureReason(topic, a.Err), a.Err)
	}
	s.resBytes.Add(uint64(len(a.Body)))
	if err := s.l.Publish(ctx, res, 1, false, a.Body); err != nil {
		s.log.Debug("fleet: answer not sent", "topic", res, "err", err)
		if a.Err == nil {
			s.fail(dev, a.Name, "answer not sent", err)
		}
	}
}

// responseTopic turns .../<device>/req/<name>/<id> into
// .../<device>/res/<name>/<id> and returns the request's name.
func responseTopic(req string) (res, name string, ok bool) {
	parts := strings.Split(req, "/")
	if len(parts) != 7 || parts[4] != "req" || parts[3] == "" || parts[5] == "" || parts[6] == "" {
		return "", "", false
	}
	parts[4] = "res"
	return strings.Join(parts, "/"), parts[5], true
}

func (s *Server) leadLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if err := s.lead(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("fleet: leading", "err", err)
		}
	}
}

// holdLead keeps the lead or claims it when it is vacant (leader.go),
// and says whether this instance leads now. Only instances with keys
// lead. A claim is vacant when its record says so, or when its holder's
// own session is gone (a broker restarted without its retained records
// leaves no will to say so).
func (s *Server) holdLead(ctx context.Context) bool {
	if len(s.cfg.Keys) == 0 || !s.l.Stats().Connected {
		s.dropClaim()
		return false
	}
	top, last, highest := s.view.Leader()
	if s.claim != nil {
		if s.claim.live() {
			s.vacantAt = time.Time{}
			if err := s.claim.refresh(ctx, s.cfg.Fleet, last); err != nil {
				s.log.Warn("fleet: republishing the lead", "err", err)
			}
			return true
		}
		s.log.Warn("fleet: lost the lead", "instance", s.id, "epoch", s.claim.epoch.String())
		s.dropClaim()
	}
	// Held by another instance that is online: not vacant. Held by this
	// one, which holds no live session: lost (a broker restarted without
	// its retained records sends no will), so claim again. A record from
	// before this instance's current connection that the broker did not
	// send again (retained records come at once on subscribing) is a
	// forgotten broker's: the holder may be gone with no will to say so.
	// The connection's start is the link's CONNACK, not when this loop
	// noticed it: the retained record comes right after subscribing, and
	// a loop that ticks once a second noticed later, so every instance
	// that joined took the lead from a live holder 2 s after
	// (TestFollowerJoinsWithoutClaiming).
	since := s.l.Stats().Since
	stale := !since.IsZero() && s.view.LeaderSeen().Before(since) && time.Since(since) > 2*time.Second
	online := s.view.Instances()
	if top.Held && top.Epoch.Instance != s.id && !stale && slices.Contains(online, top.Epoch.Instance) {
		s.vacantAt = time.Time{}
		return false
	}
	// Vacant. The online instances claim in the order of their names, a
	// stagger apart: two that claim at once both connect, the broker keeps
	// the later session, and when the earlier one fenced the repository
	// first, both lose and the lead is vacant again (TestLeaderClaim saw it
	// under load). The order is a hint; the claim and the fence stay what
	// makes one leader.
	now := time.Now()
	if s.vacantAt.IsZero() {
		s.vacantAt = now
	}
	if wait := time.Duration(claimRank(s.id, online)) * max(2*s.cfg.Tick, claimStagger); now.Sub(s.vacantAt) < wait {
		return false
	}
	fence, err := readFence(s.cfg.Repo)
	if err != nil {
		s.log.Warn("fleet: reading the repository's fence", "err", err)
		return false
	}
	s.claims.Add(1)
	s.log.Info("fleet: claiming the lead", "instance", s.id, "record", top.Epoch.String(), "held", top.Held, "stale", stale,
		"online", online, "vacant_for", now.Sub(s.vacantAt))
	c, err := s.claimLead(ctx, Epoch{Counter: max(highest.Counter, fence.Counter) + 1, Instance: s.id})
	if err != nil {
		s.log.Info("fleet: claim refused", "instance", s.id, "err", err)
		return false
	}
	s.claim = c
	s.vacantAt = time.Time{}
	s.signed = map[string][32]byte{} // another may have signed since: compare with the repository once
	return c != nil
}

// claimStagger is the least time between the claims of two instances
// next to each other in the claim order: a claim's connection, its record
// and its fence take a few milliseconds on a quiet machine, hundreds on
// a loaded one.
const claimStagger = 500 * time.Millisecond

// claimRank is how many online instances claim before id: those named
// lower (online is sorted: View.Instances).
func claimRank(id string, online []string) int {
	n, _ := slices.BinarySearch(online, id)
	return n
}

// dropClaim ends this instance's leadership session, if any.
func (s *Server) dropClaim() {
	if s.claim != nil {
		s.claim.l.Close()
		s.claim = nil
	}
}

// announceBulk retains the bulk URL once per connection of the leader (a
// broker restarted without persistence has lost it).
func (s *Server) announceBulk(ctx context.Context) error {
	st := s.l.Stats()
	if s.cfg.BulkURL == "" || s.bulkAt == st.Connects {
		return nil
	}
	b, _ := json.Marshal(wire.Bulk{URL: s.cfg.BulkURL})
	if err := s.l.Publish(ctx, wire.BulkTopic(s.cfg.Fleet), 1, true, b); err != nil {
		return err
	}
	s.bulkAt = st.Connects
	return nil
}

// rollback is a device to send the rollback command, and the release it
// leaves.
type rollback struct{ dev, version string }

// pass is what a leader pass decided: the rollouts (copies), those that
// changed, the rollback commands and nudges to send, and each model's
// assignments.
type pass struct {
	errs      []error
	outs      []*Rollout
	changed   []*Rollout
	rollbacks []rollback
	nudge     []string
	wants     map[string]map[string][]string
}

// plan makes a pass's decisions from the view, read in place under its
// lock (TestLeadPassMemory); what needs the disk or the broker comes
// after, in lead.
func (s *Server) plan(start time.Time) pass {
	p := pass{wants: map[string]map[string][]string{}}
	s.view.decide(func(devs deviceSet, all []*Rollout, ctls map[string]Control) {
		p.outs = all
		for _, r := range p.outs {
			dirty := false
			if c, ok := ctls[r.ID]; ok && c.Seq > r.Control {
				rb, err := r.apply(c, devs, start)
				p.errs = append(p.errs, err)
				for _, d := range rb {
					p.rollbacks = append(p.rollbacks, rollback{d, r.Version})
				}
				dirty = true
			}
			if r.advance(devs, start) {
				dirty = true
			}
			if dirty {
				s.decisions.Add(1)
				p.changed = append(p.changed, r)
			}
		}
		for _, r := range p.outs {
			if p.wants[r.Model] == nil {
				p.wants[r.Model] = assignments(r.Model, p.outs, devs)
			}
		}
		for _, r := range p.outs {
			if r.State != RolloutRunning {
				continue
			}
			for i, id := range r.Targets[:r.Assigned] {
				if start.UnixNano()-s.nudged[id] <= int64(renudge) {
					continue
				}
				if d := devs.get(id); d != nil && d.Online() && r.stepAt(i, id, d) == StepAssigned {
					if len(p.nudge) == cap(p.nudge) { // doubled: append grows a long list a quarter at a time
						p.nudge = slices.Grow(p.nudge, max(len(p.nudge), 64))
					}
					p.nudge = append(p.nudge, id)
				}
			}
		}
	})
	return p
}

// lead makes one pass: controls, decisions, director, nudges.
func (s *Server) lead(ctx context.Context) error {
	lead := s.holdLead(ctx)
	if lead {
		if err := s.announceBulk(ctx); err != nil {
			return err
		}
	}
	if s.leader.Swap(lead) != lead {
		s.leadMu.Lock()
		if s.leadChanged != nil {
			close(s.leadChanged)
			s.leadChanged = nil
		}
		s.leadMu.Unlock()
	}
	if !lead {
		return nil
	}
	start := time.Now()
	p := s.plan(start)
	errs, changed, nudge := p.errs, p.changed, p.nudge
	if len(p.wants) > 0 {
		repo, err := Open(s.cfg.Repo, InitOptions{}, nil, s.cfg.Keys...)
		if err != nil {
			return err
		}
		repo.Fence(s.claim.epoch)
		for m, want := range p.wants {
			// Unchanged since this leader last signed them: nothing to
			// read or sign (reading the index each pass was the pass's
			// largest cost at 100,000 devices).
			fp := fingerprint(want)
			if s.signed[m] == fp {
				continue
			}
			gained, ok, err := repo.assign(m, want)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			s.signed[m] = fp
			if ok {
				s.dirWrites.Add(1)
				nudge = append(nudge, gained...)
			}
		}
		if time.Since(s.lastStamp) > s.cfg.TimestampEvery {
			errs = append(errs, repo.RefreshTimestamp(update.RepoImage), repo.RefreshTimestamp(update.RepoDirector))
			s.lastStamp = time.Now()
		}
	}
	slices.Sort(nudge)
	nudge = slices.Compact(nudge)
	s.decisionNS.Store(int64(time.Since(start)))
	// The director is signed before the records say so: an instance
	// taking over from here recomputes the same assignments.
	for _, r := range changed {
		r.Epoch = s.claim.epoch
		b, _ := json.Marshal(r)
		if err := s.l.Publish(ctx, RolloutTopic(s.cfg.Fleet, r.ID), 1, true, b); err != nil {
			errs = append(errs, err)
			continue
		}
		s.view.put(r)
	}
	// A nudge older than renudge no longer holds one back: forgetting it
	// keeps the map to the devices nudged lately, not every target.
	maps.DeleteFunc(s.nudged, func(_ string, at int64) bool { return start.UnixNano()-at > int64(renudge) })
	for _, d := range nudge {
		s.nudged[d] = start.UnixNano()
		errs = append(errs, s.command(ctx, d, map[string]string{"action": "check"}))
	}
	// The rollback names the release it undoes: a device not running it
	// (one that had not taken it yet) must not go back a version further.
	for _, rb := range p.rollbacks {
		errs = append(errs, s.command(ctx, rb.dev, map[string]string{"action": "rollback", "version": rb.version}))
	}
	return errors.Join(errs...)
}

// command sends the update command to a device at QoS 1: its persistent
// session keeps it while the device is away.
func (s *Server) command(ctx context.Context, dev string, args map[string]string) error {
	s.nudges.Add(1)
	var b [8]byte
	_, _ = rand.Read(b[:])
	body, _ := json.Marshal(map[string]any{"id": hex.EncodeToString(b[:]), "args": args})
	return s.l.Publish(ctx, link.NewTopics(s.cfg.Fleet, dev).Cmd(wire.CommandUpdate), 1, false, body)
}
