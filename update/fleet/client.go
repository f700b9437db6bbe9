package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
)

// ClientConfig is an operator's connection (fleet rollout, fleet status):
// link.Config's connection fields. It is plain data.
type ClientConfig struct {
	Broker   string `json:"broker"`
	Fleet    string `json:"fleet"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	CAFile   string `json:"ca_file,omitempty"`
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
}

// Client is an operator's session with the fleet: it reads the fleet's
// state into a View (every retained record arrives on subscription) and
// writes rollouts and controls. Safe for concurrent use.
type Client struct {
	fleet string
	l     *link.Link
	view  *View
}

// Dial connects an operator's client (_op-<random>, clean session) and
// subscribes to the fleet's state.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	l, err := link.Open(ctx, link.Config{Broker: cfg.Broker, Fleet: cfg.Fleet, Device: OperatorName(),
		Username: cfg.Username, Password: cfg.Password, CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile,
		CleanSession: true, QueueLen: fleetQueue}, nil)
	if err != nil {
		return nil, err
	}
	c := &Client{fleet: cfg.Fleet, l: l, view: NewView(cfg.Fleet)}
	if err := l.WaitConnected(ctx); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	for _, f := range c.view.Filters() {
		if err := l.Subscribe(ctx, f, 1, func(m link.Message) { _ = c.view.Ingest(m.Topic, m.Payload, time.Now()) }); err != nil {
			return nil, errors.Join(err, l.Close())
		}
	}
	return c, nil
}

// OperatorName is a fresh client name for an operator's session
// ("_op-<random>"): names starting with '_' are the fleet's own, never a
// device's, so an operator's client never takes over a device's session.
func OperatorName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "_op-" + hex.EncodeToString(b[:])
}

// View is the client's picture of the fleet (filling as retained
// records arrive after Dial).
func (c *Client) View() *View { return c.view }

// Settle waits until no message arrived for quiet (the retained records
// have come in), or ctx ends.
func (c *Client) Settle(ctx context.Context, quiet time.Duration) {
	last, n := time.Now(), sumMsgs(c.view)
	for ctx.Err() == nil {
		time.Sleep(quiet / 4)
		if m := sumMsgs(c.view); m != n {
			last, n = time.Now(), m
		} else if time.Since(last) >= quiet {
			return
		}
	}
}

func sumMsgs(v *View) uint64 {
	var n uint64
	for _, x := range v.Messages() {
		n += x
	}
	return n
}

// StartRollout publishes a new rollout (state running, not started: the
// leading fleet serve instance selects its targets). An id already in use
// is refused.
func (c *Client) StartRollout(ctx context.Context, r Rollout) error {
	r.Schema, r.State, r.Started = RolloutSchema, RolloutRunning, false
	r.Created, r.Updated = time.Now().UTC(), time.Now().UTC()
	r.Targets, r.Assigned, r.Wave = []string{}, 0, 0
	if err := r.Validate(); err != nil {
		return err
	}
	if old := c.view.Rollout(r.ID); old != nil {
		return fmt.Errorf("%w: rollout %s exists (%s); pick another id", ErrRollout, r.ID, old.State)
	}
	b, _ := json.Marshal(r)
	return c.l.Publish(ctx, RolloutTopic(c.fleet, r.ID), 1, true, b)
}

// Control sends an operator's control of rollout id (its Seq is set
// here, from the clock).
func (c *Client) Control(ctx context.Context, id string, ctl Control) error {
	if err := ctl.Validate(); err != nil {
		return err
	}
	if c.view.Rollout(id) == nil {
		return fmt.Errorf("%w: no rollout %q", ErrRollout, id)
	}
	ctl.Seq = time.Now().UnixNano()
	b, _ := json.Marshal(ctl)
	return c.l.Publish(ctx, ControlTopic(c.fleet, id), 1, true, b)
}

// Close disconnects.
func (c *Client) Close() error { return c.l.Close() }
