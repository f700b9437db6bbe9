package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
)

// Leadership is an atomic claim on the broker, fenced in the repository.
//
// The claim is an MQTT session with one client id for the whole fleet
// (ClaimClientID): the broker lets one connection hold a client id at a
// time, and a second CONNECT with it closes the first (MQTT 3.1.1,
// 3.1.4-2). An instance claims only when the claim is vacant, as the
// retained record on LeaderTopic says: the session's first message marks
// it held, its will (published by the broker when the session is lost,
// taken over or partitioned away) marks it vacant. Each claim carries an
// Epoch one above the highest seen; a record of a lower epoch (the will
// of a session taken over, arriving after its successor's claim) is
// ignored, and the holder publishes its record again when the broker's
// retained value is not its own.
//
// Instances that find the lead vacant claim in the order of their names,
// a stagger apart (claimRank in serve.go), so that a vacancy seen by every
// follower at once is not a collision of claims; the order is a hint,
// which views that disagree (an instance not yet seen online) can break.
// Two instances that both saw it vacant both connect; the broker keeps
// the second, and the first sees its session end (the link of
// Config.Once does not reconnect, which would take the id back). Until it
// sees that, the first may still act: every write that matters is fenced.
// When the first fenced the repository before the second, the second's
// claim is refused there and it lets its session go, so both lost: the
// lead is vacant until the next claim, a counter up (TestLeaderClaim).
// The repository keeps the highest epoch that fenced it
// (state/leader.json, under the directory's lock): a claim raises it
// before its holder leads, a lower epoch is refused there (ErrFenced),
// and every signed change of a fenced Repository checks it. Rollout
// records carry their writer's epoch, and views keep the record of the
// higher one. Nudges are hints and need no fence.

// ErrFenced: a leader's epoch is below the one the repository was last
// fenced with: another instance leads now.
var ErrFenced = errors.New("fleet: fenced: another instance claimed the lead")

// Epoch orders leadership claims: Counter grows with each claim, and
// Instance breaks the tie of two instances that claimed the same counter
// at once.
type Epoch struct {
	Counter  uint64 `json:"counter"`
	Instance string `json:"instance,omitempty"`
}

// Less orders epochs.
func (e Epoch) Less(o Epoch) bool {
	return e.Counter < o.Counter || e.Counter == o.Counter && e.Instance < o.Instance
}

func (e Epoch) String() string { return fmt.Sprintf("%d/%s", e.Counter, e.Instance) }

// LeaderRecord is LeaderTopic's retained payload.
type LeaderRecord struct {
	Epoch Epoch  `json:"epoch"`
	Held  bool   `json:"held"`
	Time  string `json:"time,omitempty"` // absent in the will (written ahead of time)
}

// LeaderTopic is where the claim's state is retained.
func LeaderTopic(fleet string) string {
	return link.Root + "/" + fleet + "/" + fleetDir + "/leader/claim"
}

// ClaimClientID is the client id of the leadership session: one per
// fleet, so the broker lets one instance hold it.
func ClaimClientID(fleet string) string { return "edgeinfer-" + fleet + "-leader" }

// claim is this instance's leadership session.
type claim struct {
	l     *link.Link
	epoch Epoch
}

// claimLead opens the leadership session at epoch e and fences the
// repository with it. It returns nil, nil when the session could not be
// had (the broker is away, or another took it meanwhile).
func (s *Server) claimLead(ctx context.Context, e Epoch) (*claim, error) {
	cfg := s.cfg.linkConfig()
	cfg.Device, cfg.ClientID, cfg.CleanSession, cfg.Once, cfg.QueueLen = "_leader", ClaimClientID(s.cfg.Fleet), true, true, 1
	will, _ := json.Marshal(LeaderRecord{Epoch: e})
	l, err := link.OpenWith(ctx, cfg, link.Hooks{
		Will: func() (string, []byte, byte, bool) { return LeaderTopic(s.cfg.Fleet), will, 1, true },
		OnConnect: func(ctx context.Context, publish func(string, byte, bool, []byte) error) error {
			return publish(LeaderTopic(s.cfg.Fleet), 1, true, heldRecord(e))
		},
	})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := l.WaitConnected(wctx); err != nil {
		l.Close()
		return nil, nil
	}
	if err := fenceRepo(s.cfg.Repo, e); err != nil {
		l.Close() // its will says vacant: whoever fenced higher claims next
		return nil, err
	}
	s.log.Info("fleet: leading", "instance", s.id, "epoch", e.String())
	return &claim{l: l, epoch: e}, nil
}

// live says whether the claim's session still holds the client id.
func (c *claim) live() bool {
	select {
	case <-c.l.Ended():
		return false
	default:
		return c.l.Stats().Connected
	}
}

// refresh republishes the held record when the broker's retained value is
// another (a will of a lower epoch that arrived after the claim).
func (c *claim) refresh(ctx context.Context, fleet string, last LeaderRecord) error {
	if last.Held && last.Epoch == c.epoch {
		return nil
	}
	return c.l.Publish(ctx, LeaderTopic(fleet), 1, true, heldRecord(c.epoch))
}

// heldRecord is the claim record of a session holding epoch e.
func heldRecord(e Epoch) []byte {
	b, _ := json.Marshal(LeaderRecord{Epoch: e, Held: true, Time: time.Now().UTC().Format(time.RFC3339Nano)})
	return b
}

// leaderPath is where a repository keeps the epoch that fenced it last.
func leaderPath(dir string) string { return filepath.Join(dir, "state", "leader.json") }

func readFence(dir string) (Epoch, error) {
	var e Epoch
	b, err := os.ReadFile(leaderPath(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return e, nil
	}
	if err != nil {
		return e, err
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("%w: %s: %v", ErrRepo, leaderPath(dir), err)
	}
	return e, nil
}

// fenceRepo raises the repository's fence to e, under its lock; an epoch
// below the fence is ErrFenced.
func fenceRepo(dir string, e Epoch) error {
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	have, err := readFence(dir)
	if err != nil {
		return err
	}
	if e.Less(have) {
		return &FencedError{Epoch: e, Fence: have}
	}
	if err := os.MkdirAll(filepath.Dir(leaderPath(dir)), 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(e)
	return writeAtomic(leaderPath(dir), b)
}

// FencedError is ErrFenced with the epochs.
type FencedError struct{ Epoch, Fence Epoch }

func (e *FencedError) Error() string {
	return fmt.Sprintf("%v: epoch %s, the repository is fenced at %s", ErrFenced, e.Epoch, e.Fence)
}
func (e *FencedError) Unwrap() error { return ErrFenced }

// Fence makes every later change of r check, under the directory's lock,
// that no claim above e has fenced the repository.
func (r *Repository) Fence(e Epoch) { r.fence = &e }

// checkFence is change's check, under the lock.
func (r *Repository) checkFence() error {
	if r.fence == nil {
		return nil
	}
	have, err := readFence(r.Dir)
	if err != nil {
		return err
	}
	if have != *r.fence {
		return &FencedError{Epoch: *r.fence, Fence: have}
	}
	return nil
}
