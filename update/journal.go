package update

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// journalBucket is the agent's owner bucket in the store. Keys:
//
//	current          the Journal of the latest update (JSON)
//	installed/NAME   the counter of the active release (the last activated,
//	                 or the one a rollback went back to)
//	previous/NAME    the counter of the previous release (the store's
//	                 rollback target), so a rollback knows what it installs
//	failed/NAME      the counter of the last release that failed its check
//	rolledback/NAME  the highest counter rolled back from: releases up to
//	                 it are not installed again
//	clock            the clock floor (RFC 3339): see Agent.refTime
//	trusted_expiry   the expiry of the newest image timestamp trusted
//
// Each write is one durable bbolt transaction, so after a kill the journal
// says exactly which step last completed.
const journalBucket = "update"

// Phase is where an update stands.
type Phase string

// Phases of the journal.
const (
	PhaseIdle        Phase = ""
	PhaseDownloading Phase = "downloading"
	PhaseStaged      Phase = "staged"
	PhaseChecking    Phase = "checking"
	PhaseActive      Phase = "active"
	PhaseFailed      Phase = "failed"
	PhaseRefused     Phase = "refused"
	PhaseAbandoned   Phase = "abandoned"
	PhaseRolledBack  Phase = "rolled_back"
)

// InProgress reports whether an update was interrupted in this phase.
func (p Phase) InProgress() bool {
	return p == PhaseDownloading || p == PhaseStaged || p == PhaseChecking
}

// Journal is the durable record of the latest update.
type Journal struct {
	Phase   Phase     `json:"phase"`
	Model   string    `json:"model"`
	Version string    `json:"version,omitempty"`
	Counter uint64    `json:"counter,omitempty"`
	Done    int64     `json:"done,omitempty"`
	Total   int64     `json:"total,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Updated time.Time `json:"updated"`
}

func (a *Agent) readJournal(ctx context.Context) (Journal, error) {
	var j Journal
	err := a.st.View(ctx, journalBucket, func(tx *store.Tx) error {
		if b := tx.Get([]byte("current")); b != nil {
			return json.Unmarshal(b, &j)
		}
		return nil
	})
	if err != nil {
		return Journal{}, fmt.Errorf("update: read journal: %w", err)
	}
	return j, nil
}

// writeJournal records j; extra keys (counters) commit in the same
// transaction, so the phase and the counter never disagree after a kill.
func (a *Agent) writeJournal(ctx context.Context, j Journal, extra map[string]string) error {
	j.Updated = a.now().UTC()
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	err = a.st.Update(ctx, journalBucket, func(tx *store.Tx) error {
		for k, v := range extra {
			if err := tx.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return tx.Put([]byte("current"), b)
	})
	if err != nil {
		return fmt.Errorf("update: write journal: %w", err)
	}
	return nil
}

// counter reads installed/NAME or failed/NAME (0 when absent).
func (a *Agent) counter(ctx context.Context, key string) (uint64, error) {
	var n uint64
	err := a.st.View(ctx, journalBucket, func(tx *store.Tx) error {
		b := tx.Get([]byte(key))
		if b == nil {
			return nil
		}
		var err error
		n, err = strconv.ParseUint(string(b), 10, 64)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("update: journal %s: %w", key, err)
	}
	return n, nil
}

// counters are a model's journal counters (see journalBucket).
type counters struct {
	installed, previous, failed, rolledBack uint64
}

func (a *Agent) counters(ctx context.Context, model string) (counters, error) {
	var c counters
	err := a.st.View(ctx, journalBucket, func(tx *store.Tx) error {
		for key, p := range map[string]*uint64{"installed/": &c.installed, "previous/": &c.previous, "failed/": &c.failed, "rolledback/": &c.rolledBack} {
			if b := tx.Get([]byte(key + model)); b != nil {
				n, err := strconv.ParseUint(string(b), 10, 64)
				if err != nil {
					return fmt.Errorf("%s%s: %w", key, model, err)
				}
				*p = n
			}
		}
		return nil
	})
	if err != nil {
		return counters{}, fmt.Errorf("update: journal counters: %w", err)
	}
	return c, nil
}

// setCounters writes journal counters in one transaction.
func (a *Agent) setCounters(ctx context.Context, kv map[string]uint64) error {
	err := a.st.Update(ctx, journalBucket, func(tx *store.Tx) error {
		for k, v := range kv {
			if err := tx.Put([]byte(k), []byte(strconv.FormatUint(v, 10))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("update: journal counters: %w", err)
	}
	return nil
}

// clockFloor returns the latest trusted time recorded.
func (a *Agent) clockFloor(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := a.st.View(ctx, journalBucket, func(tx *store.Tx) error {
		if b := tx.Get([]byte("clock")); b != nil {
			return t.UnmarshalText(b)
		}
		return nil
	})
	return t, err
}

func (a *Agent) raiseClockFloor(ctx context.Context, t time.Time) error {
	b, err := t.UTC().MarshalText()
	if err != nil {
		return err
	}
	return a.st.Update(ctx, journalBucket, func(tx *store.Tx) error {
		var old time.Time
		if cur := tx.Get([]byte("clock")); cur != nil && old.UnmarshalText(cur) == nil && !t.After(old) {
			return nil
		}
		return tx.Put([]byte("clock"), b)
	})
}

func (a *Agent) trustedExpiry(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := a.st.View(ctx, journalBucket, func(tx *store.Tx) error {
		if b := tx.Get([]byte("trusted_expiry")); b != nil {
			return t.UnmarshalText(b)
		}
		return nil
	})
	return t, err
}

func (a *Agent) setTrustedExpiry(ctx context.Context, t time.Time) error {
	b, err := t.UTC().MarshalText()
	if err != nil {
		return err
	}
	return a.st.Update(ctx, journalBucket, func(tx *store.Tx) error { return tx.Put([]byte("trusted_expiry"), b) })
}
