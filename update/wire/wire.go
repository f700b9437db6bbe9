// Package wire is the schema the fleet and its devices share on the
// broker: the device's retained update state, its update events, the
// update command's arguments and the request names the fleet answers.
//
// It is a leaf both sides import (update/rollout on the device,
// update/fleet in the cloud), so neither imports the other to agree on
// a payload.
package wire

import (
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/update"
)

// StateSchema versions the retained update state.
const StateSchema = "edgeinfer.update-state/1"

// EventSchema versions update events on the events topic.
const EventSchema = "edgeinfer.update-event/1"

// CommandUpdate is the command the fleet sends; its arguments are a
// Command.
const CommandUpdate = "update"

// Command actions.
const (
	ActionCheck    = "check"
	ActionRollback = "rollback"
	ActionState    = "state"
)

// Command is the update command's arguments: {"action":"check"} or
// {"action":"rollback","version":"3"}.
type Command struct {
	Action string `json:"action"`
	// Version, on a rollback, is the release rolled back from: a device
	// that does not run it stays where it is and checks instead.
	Version string `json:"version,omitempty"`
}

// StateTopic is the device's retained update-state topic.
func StateTopic(t link.Topics) string { return t.Base() + "update" }

// RequestName maps an update.MQTTSource request topic ("tuf/meta") to the
// link's one-level request name ("tuf-meta"): the link's request topics
// are req/<name>/<id>, so a name cannot hold '/'.
func RequestName(topic string) string { return strings.ReplaceAll(topic, "/", "-") }

// State is the retained payload of the update topic: who the device is
// (board, labels) and where its model stands. It is plain data.
type State struct {
	Schema string            `json:"schema"`
	Seq    uint64            `json:"seq"`
	Fleet  string            `json:"fleet"`
	Device string            `json:"device"`
	Board  string            `json:"board,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	Model  string            `json:"model"`
	// Active and Previous are the store's versions of Model.
	Active    string `json:"active,omitempty"`
	Previous  string `json:"previous,omitempty"`
	Installed uint64 `json:"installed_counter,omitempty"`
	// Phase, Version, Counter and Reason are the journal's: the latest
	// update attempted and how it ended (or where it is).
	Phase   update.Phase `json:"phase,omitempty"`
	Version string       `json:"version,omitempty"`
	Counter uint64       `json:"counter,omitempty"`
	Reason  string       `json:"reason,omitempty"`
	// LastEvent is the latest event's kind; Refused the reason of the
	// latest refusal (a refusal does not always reach the journal) and
	// RefusedVersion the release it refused ("" when the refusal came
	// before any release was chosen: metadata the device cannot trust),
	// so a refusal of one release is not read as one of another.
	LastEvent      string `json:"last_event,omitempty"`
	Refused        string `json:"refused,omitempty"`
	RefusedVersion string `json:"refused_version,omitempty"`
	// Checked is when the device last finished an update check (RFC
	// 3339, whatever its outcome): "up to date" and "never checked" look
	// alike otherwise.
	Checked string `json:"checked,omitempty"`
	Time    string `json:"time"`
}

// Event is an update event on the device's events topic.
type Event struct {
	Schema string       `json:"schema"`
	Seq    uint64       `json:"seq"`
	Device string       `json:"device"`
	Event  update.Event `json:"event"`
}

// BulkTopic is where the fleet retains the static host its devices fetch
// metadata and chunks from (a Bulk), so that the broker carries control
// only. It is a hint: whatever a device fetches is checked against the
// TUF metadata it trusts, so a wrong URL costs a fallback to the request
// topics, never a bad install.
func BulkTopic(fleet string) string { return link.Root + "/" + fleet + "/_fleet/bulk" }

// Bulk is BulkTopic's payload.
type Bulk struct {
	// URL is the base of a repository laid out as update.Source says
	// (image/, director/, chunks/), served over HTTPS by any static host.
	URL string `json:"url"`
}
