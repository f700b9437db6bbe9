package sched

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Scheduler shares one device between generation and one-shot requests. One
// goroutine, started by New and joined by Close, owns the device loop and is
// the only caller of the Executor. Submit, Infer, Stats, Records and Close
// are safe for concurrent use.
//
// P is the one-shot payload type (the engine's tensors): the scheduler
// batches payloads without looking inside them.
type Scheduler[P any] struct {
	cfg Config
	dec Decoder
	one Oneshot[P]
	log *slog.Logger

	life     context.Context // the device loop's lifetime; cancelled by Close
	abort    context.CancelFunc
	wake     chan struct{} // capacity 1: "something changed, look again"
	recorded chan struct{} // capacity 1: "a record is waiting for Records"
	loopDone chan struct{}

	closeOnce sync.Once
	closeErr  error
	nextID    atomic.Uint64

	mu struct {
		sync.Mutex
		closed  bool
		queue   [numClasses][]*genReq     // waiting generation, by SeqID within a class
		infer   map[string][]*inferReq[P] // waiting one-shot per model, by class then id
		inferN  [numClasses]int           // waiting one-shot per class
		backlog [numClasses]int           // prefill tokens still to compute, queued + admitted
		est     estimates                 // measured throughput and step times
		// decodeTail is the most tokens a running sequence may still
		// generate, as of the last step (for a refusal's RetryAfter).
		decodeTail int
		decodeLeft int        // the tokens all running sequences may still generate
		decodeMin  int        // the fewest tokens a running sequence may still generate
		nextProbe  time.Time  // when an idle device may next admit a probe (refuseLocked)
		stats      Stats      // counters; depths filled in by Stats()
		records    []Timeline // finished, not yet drained
		dropped    uint64     // records dropped past MaxRecords
		// changed is closed and replaced when a request is queued,
		// admitted, preempted or finished (Changed).
		changed chan struct{}
	}

	// Owned by the device loop goroutine.
	running  []*genReq
	byID     map[SeqID]*genReq
	admitSeq uint64
	order    []*genReq
	batch    Batch
	cost     map[string]*decodeCost // per model: step time by decode rows, for TPOT-aware admission
	admitted int                    // admissions since the last step (observeAdmitsLocked)
	lastStep time.Time              // when the last step ended
}

// New validates cfg and starts the device loop driving exec. Call Close to
// stop it.
func New[P any](dec Decoder, one Oneshot[P], cfg Config, log *slog.Logger) (*Scheduler[P], error) {
	if dec == nil || one == nil {
		return nil, fmt.Errorf("%w: nil executor", ErrInvalidConfig)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sched: new: %w", err)
	}
	s := &Scheduler[P]{
		cfg:      cfg.withDefaults(),
		dec:      dec,
		one:      one,
		log:      log,
		wake:     make(chan struct{}, 1),
		recorded: make(chan struct{}, 1),
		loopDone: make(chan struct{}),
		byID:     make(map[SeqID]*genReq),
		cost:     make(map[string]*decodeCost),
	}
	s.life, s.abort = context.WithCancel(context.Background())
	s.mu.infer = make(map[string][]*inferReq[P])
	s.mu.changed = make(chan struct{})
	s.mu.est.prefillRate = s.cfg.PrefillRateHint
	s.mu.est.inferTime = make(map[string]time.Duration)
	go s.run()
	return s, nil
}

// Config is the effective configuration (zero fields replaced by defaults).
func (s *Scheduler[P]) Config() Config { return s.cfg }

// genReq is a generation request inside the scheduler.
type genReq struct {
	id        SeqID
	ctx       context.Context
	stopWake  func() bool
	req       Request
	class     Class
	tokens    []int32 // prompt, then generated tokens
	promptLen int
	deadline  time.Time
	probe     bool // admitted to measure the device again (refuseLocked): never late, never expired

	// Device-loop state.
	admitted   bool   // the Executor holds KV for it
	admitOrder uint64 // increases with every admission
	// late: admitted after its TTFT objective was already missed. It stays
	// late (lateLocked) after a preemption, so it keeps yielding to requests
	// that can still be on time, in the queue and in the batch (preemptFor).
	late      bool
	reserved  int  // tokens the Executor holds room for
	prefilled int  // tokens whose KV is computed
	wantToken bool // the current step must sample a token for it
	backlog   int  // its share of mu.backlog (guarded by mu)
	// tpotDeferred: admission waited on the TPOT rule at least once.
	tpotDeferred bool

	tl     Timeline
	stream *Stream
}

// Submit queues a generation request and returns its stream. ctx governs the
// request: cancelling it cancels the request, its deadline times it out.
// A request refused at once (queue full, predicted TTFT over a fail-fast SLO)
// returns an *OverloadError; it is still recorded with outcome rejected.
func (s *Scheduler[P]) Submit(ctx context.Context, req Request) (*Stream, error) {
	if err := validateRequest(req.Model, req.Class, req.SLO); err != nil {
		return nil, err
	}
	if len(req.Prompt) == 0 || req.MaxTokens < 0 {
		return nil, fmt.Errorf("%w: empty prompt or negative MaxTokens", ErrInvalidRequest)
	}
	now := time.Now()
	id := SeqID(s.nextID.Add(1))
	class := req.Class.normalize()
	req.Prompt = slices.Clip(slices.Clone(req.Prompt))
	rctx, cancel := context.WithCancelCause(ctx)
	g := &genReq{
		id: id, ctx: rctx, req: req, class: class,
		tokens: req.Prompt, promptLen: len(req.Prompt),
		tl: Timeline{
			ID: uint64(id), Kind: KindGenerate, Model: req.Model, Class: class,
			SLO: req.SLO, FailFast: req.FailFast, PromptTokens: len(req.Prompt), Arrived: now, LoadTime: req.LoadTime,
		},
		stream: newStream(id, cancel),
	}
	if req.SLO.Deadline > 0 {
		g.deadline = now.Add(req.SLO.Deadline)
	}

	g.stopWake = context.AfterFunc(rctx, s.signal)
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		cancel(nil)
		g.stopWake()
		return nil, fmt.Errorf("sched: submit: %w", ErrClosed)
	}
	p := s.predictTTFTLocked(class, len(req.Prompt), now)
	probe, err := s.refuseLocked(class, req.SLO.TTFT, req.FailFast, p, now)
	if err != nil {
		s.rejectLocked(&g.tl, now, err)
		s.mu.Unlock()
		cancel(nil)
		g.stopWake()
		return nil, fmt.Errorf("sched: submit: %w", err)
	}
	g.probe = probe
	s.enqueueLocked(g)
	s.setBacklogLocked(g, len(g.tokens))
	s.mu.Unlock()

	s.signal()
	return g.stream, nil
}

func validateRequest(model string, c Class, slo SLO) error {
	if model == "" {
		return fmt.Errorf("%w: no model", ErrInvalidRequest)
	}
	if c != ClassUnset && !c.valid() {
		return fmt.Errorf("%w: unknown class %d", ErrInvalidRequest, c)
	}
	if slo.TTFT < 0 || slo.TPOT < 0 || slo.Deadline < 0 {
		return fmt.Errorf("%w: negative slo", ErrInvalidRequest)
	}
	return nil
}

// rejectLocked records a request refused at Submit or Infer.
func (s *Scheduler[P]) rejectLocked(tl *Timeline, now time.Time, err error) {
	tl.Finished, tl.Outcome, tl.Err = now, OutcomeRejected, err.Error()
	s.recordLocked(*tl)
}

// enqueueLocked inserts g into its class queue in SeqID order, so a
// preempted sequence goes back ahead of later arrivals (FIFO by arrival).
func (s *Scheduler[P]) enqueueLocked(g *genReq) {
	q := &s.mu.queue[g.class.index()]
	i, _ := slices.BinarySearchFunc(*q, g.id, func(e *genReq, id SeqID) int { return cmp.Compare(e.id, id) })
	*q = slices.Insert(*q, i, g)
	s.changedLocked()
}

// Changed returns a channel closed at the next change of what Stats
// counts as running or queued: for a caller to wait on, not to poll.
func (s *Scheduler[P]) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.changed
}

func (s *Scheduler[P]) changedLocked() {
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
}

// setBacklogLocked sets g's share of the prefill backlog of its class.
func (s *Scheduler[P]) setBacklogLocked(g *genReq, n int) {
	s.mu.backlog[g.class.index()] += n - g.backlog
	g.backlog = n
}

// recordLocked keeps a finished timeline until Records drains it.
func (s *Scheduler[P]) recordLocked(tl Timeline) {
	if len(s.mu.records) >= s.cfg.MaxRecords {
		n := len(s.mu.records) - s.cfg.MaxRecords + 1
		s.mu.records = slices.Delete(s.mu.records, 0, n)
		s.mu.dropped += uint64(n)
	}
	s.mu.records = append(s.mu.records, tl)
	select {
	case s.recorded <- struct{}{}:
	default:
	}
	switch tl.Outcome {
	case OutcomeCompleted:
		s.mu.stats.Completed++
	case OutcomeCancelled:
		s.mu.stats.Cancelled++
	case OutcomeRejected:
		s.mu.stats.Rejected++
	case OutcomeTimedOut:
		s.mu.stats.TimedOut++
	case OutcomeFailed:
		s.mu.stats.Failed++
	}
}

// Recorded is signalled (capacity 1, never closed) whenever a finished
// request's timeline is waiting for Records, so one reader can pass records
// on as they happen without polling. The buffer holds at most MaxRecords:
// a reader that falls behind loses the oldest, counted in
// Stats.RecordsDropped, so memory stays bounded.
func (s *Scheduler[P]) Recorded() <-chan struct{} { return s.recorded }

// Records returns the timelines of requests finished since the last call, in
// finishing order, and forgets them. Every request that entered Submit or
// Infer past validation appears exactly once, whatever its outcome.
func (s *Scheduler[P]) Records() []Timeline {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.mu.records
	s.mu.records = nil
	return r
}

// signal wakes the device loop without blocking.
func (s *Scheduler[P]) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close stops accepting requests and drains: queued and running requests
// run to their end. If ctx ends first, the rest are cancelled (outcome
// cancelled, KV freed) and Close returns an error wrapping ctx's. It returns
// after the device loop has exited. Idempotent: later calls return the first
// result without waiting again.
func (s *Scheduler[P]) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.mu.closed = true
		s.mu.Unlock()
		s.signal()
		select {
		case <-s.loopDone:
		case <-ctx.Done():
			s.abort()
			<-s.loopDone
			s.closeErr = fmt.Errorf("sched: close: drain cut short, remaining requests cancelled: %w", context.Cause(ctx))
		}
		s.abort()
	})
	return s.closeErr
}
