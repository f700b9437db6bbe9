package link

import "strings"

// Root is the first level of every edgeinfer topic; the version lets a
// fleet run devices of two topic layouts side by side.
const Root = "edgeinfer/v1"

// Topics builds the topic names of one device. Every topic lives under
// edgeinfer/v1/<fleet>/<device>/ so one broker ACL pattern
// (edgeinfer/v1/<fleet>/%u/#) confines a device to its own subtree:
//
//	status                 retained: online (birth) / offline (will, close)
//	telemetry              periodic snapshots (outbox, QoS 1)
//	events                 things that happened (outbox, QoS 1, never dropped)
//	cmd/<name>             commands to the device (the fleet publishes)
//	cmdres/<name>          the device's answers, carrying the request id
//	req/<topic>/<id>       the device's requests to the cloud (OTA transport;
//	                       topic may have levels: tuf/meta, tuf/chunk)
//	res/<topic>/<id>       the cloud's answers to them
//
// Topics is plain data, safe for concurrent use.
type Topics struct{ base string }

// NewTopics returns the topics of device in fleet.
func NewTopics(fleet, device string) Topics {
	return Topics{base: Root + "/" + fleet + "/" + device + "/"}
}

// Base is the device's subtree with a trailing '/'.
func (t Topics) Base() string { return t.base }

// Status is the retained online/offline topic.
func (t Topics) Status() string { return t.base + "status" }

// Telemetry is the periodic snapshot topic.
func (t Topics) Telemetry() string { return t.base + "telemetry" }

// Events is the topic of events (update progress, errors).
func (t Topics) Events() string { return t.base + "events" }

// Cmd is the topic of command name; Cmd("+") is the filter of all.
func (t Topics) Cmd(name string) string { return t.base + "cmd/" + name }

// CmdResponse is where the device answers command name.
func (t Topics) CmdResponse(name string) string { return t.base + "cmdres/" + name }

// Request is the topic of the device's request name with correlation id.
func (t Topics) Request(name, id string) string { return t.base + "req/" + name + "/" + id }

// Response is the topic the cloud answers request name/id on.
func (t Topics) Response(name, id string) string { return t.base + "res/" + name + "/" + id }

// Under returns the part of topic after the device's base and true, or
// false when topic is not the device's.
func (t Topics) Under(topic string) (string, bool) { return strings.CutPrefix(topic, t.base) }
