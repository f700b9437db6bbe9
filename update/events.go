package update

import (
	"context"
	"time"
)

// EventKind names a step of an update.
type EventKind string

// The steps of an update, in the order they happen.
const (
	EventOffered      EventKind = "offered"       // a newer release is signed and assigned
	EventDownloading  EventKind = "downloading"   // Done of Total missing bytes are in
	EventVerified     EventKind = "verified"      // every chunk and file matches its signed digest
	EventStaged       EventKind = "staged"        // the version is in the store, not active
	EventHealthOK     EventKind = "health_ok"     // the golden check passed (figures in Health)
	EventHealthFailed EventKind = "health_failed" // it failed (figures and reason)
	EventActive       EventKind = "active"        // the new version serves
	EventRolledBack   EventKind = "rolled_back"   // back on the previous version
	EventRefused      EventKind = "refused"       // the release was refused (Reason)
	EventAbandoned    EventKind = "abandoned"     // an interrupted update no longer applies
)

// Event is one step of an update, for the outbox. It is plain data.
type Event struct {
	Kind    EventKind `json:"kind"`
	Model   string    `json:"model"`
	Version string    `json:"version,omitempty"`
	Counter uint64    `json:"counter,omitempty"`
	Time    time.Time `json:"time"`
	// Done and Total are bytes to fetch (downloading); Percent is their ratio.
	Done    int64   `json:"done,omitempty"`
	Total   int64   `json:"total,omitempty"`
	Percent float64 `json:"percent,omitempty"`
	// Reason says why (refused, health_failed, rolled_back, abandoned).
	Reason string `json:"reason,omitempty"`
	// Health holds the measured figures of the health check.
	Health *HealthReport `json:"health,omitempty"`
}

// Events receives every step; the link's durable outbox implements it. An
// error from Emit is logged and the update goes on: status reporting must
// not decide whether a device installs a signed release.
type Events interface {
	Emit(ctx context.Context, e Event) error
}

// EventFunc adapts a function to Events.
type EventFunc func(ctx context.Context, e Event) error

// Emit implements Events.
func (f EventFunc) Emit(ctx context.Context, e Event) error { return f(ctx, e) }
