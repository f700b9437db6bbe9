// Package link is the device's connection to the cloud tier over MQTT
// 3.1.1 (github.com/eclipse/paho.mqtt.golang): one connection per device,
// shared by telemetry, commands and the update transport; a durable
// outbox in a pkg/store file; telemetry snapshots; commands.
//
// # Connection
//
// Open starts a Link that connects in the background and reconnects with
// exponential backoff and jitter until Close. The session is persistent
// (clean session false, a stable client id), and every subscription is
// made again on each connection, so commands published while the device
// was away are delivered when it returns (the broker queues QoS 1
// messages for a persistent session: raise mosquitto's
// max_queued_messages, 1000 by default, if commands can pile up). The
// will is the retained status "offline"; on every connection the device
// publishes the retained status "online" with its SDK version, board and
// model versions (the birth); Close publishes "offline" itself, since a
// clean disconnect suppresses the will.
//
// Connection failures name their cause: ErrUnreachable, ErrUnknownCA,
// ErrHostname, ErrBadCertificate (the broker's, or the device's refused
// by the broker), ErrAuth. A subscription the broker refuses is ErrACL;
// such a filter is logged and the connection serves the others. A
// connection whose subscription fails otherwise (no SUBACK in time, the
// broker's packet identifiers in use for longer than about 10 s) is
// dropped and made again, so the link is never up without a subscription
// it was asked for.
//
// # Topics
//
//	edgeinfer/v1/<fleet>/<device>/status          retained online/offline (Status)
//	edgeinfer/v1/<fleet>/<device>/telemetry       snapshots (Snapshot, TELEMETRY.md)
//	edgeinfer/v1/<fleet>/<device>/events          events, never dropped by the outbox
//	edgeinfer/v1/<fleet>/<device>/cmd/<name>      commands {"id": "...", "args": {...}}
//	edgeinfer/v1/<fleet>/<device>/cmdres/<name>   answers {"id", "ok", "error", "result"}
//	edgeinfer/v1/<fleet>/<device>/req/<name>/<id> the device's requests (Link.Request)
//	edgeinfer/v1/<fleet>/<device>/res/<name>/<id> the cloud's answers
//
// # Delivery: the outbox
//
// What must reach the cloud goes through an Outbox, at QoS 1: durable
// (group-committed to a bbolt file through pkg/store), numbered (seq in
// every payload), at most Window in flight, removed only on PUBACK, sent
// again after a reconnection or a restart. A receiver therefore sees every
// message at least once and de-duplicates by (device, seq) with Dedup. The
// outbox is bounded in bytes: the oldest telemetry goes first, counted in
// the next snapshot's outbox.dropped_interval; status and events are never
// dropped (Enqueue refuses them with ErrOutboxFull at the bound). Paho's
// own Store is not used for this: it cannot report errors, its FileStore
// never fsyncs, and message ids cap it at 65,535 in flight.
//
// A PUBACK is the broker's, not the subscriber's: a broker that restarts
// without its persistence loses what it acknowledged and had not yet
// delivered, and its retained messages. The link sees it (CONNACK without
// the session a clean_session=false client had) and the outbox, after a
// second for subscribers to come back, sends again the messages
// acknowledged in the last OutboxConfig.Linger and the latest retained
// message of each topic (TestRepublishWhenBrokerForgets). A message the
// broker lost earlier than that, queued for a subscriber away for longer,
// is beyond what a device can repair: run brokers with persistence.
//
// Shared subscriptions ($share/<group>/...) are routed once: paho files a
// shared filter's route without its prefix, and the link's own routing
// does the same (TestSharedOnceAfterReconnect).
//
// # Authorisation
//
// The device does not authenticate commands: whoever may publish to
// edgeinfer/v1/<fleet>/<device>/cmd/# commands the device, so the broker's
// ACL is the authority. With mosquitto, give each device a user (or a
// client certificate with use_identity_as_username true) and confine it to
// its own subtree, and let only the fleet's operators publish commands:
//
//	# mosquitto.conf
//	allow_anonymous false
//	password_file /etc/mosquitto/passwd
//	acl_file /etc/mosquitto/acl
//
//	# /etc/mosquitto/acl — the device's user name is its device name
//	pattern write edgeinfer/v1/plant-7/%u/status
//	pattern write edgeinfer/v1/plant-7/%u/telemetry
//	pattern write edgeinfer/v1/plant-7/%u/events
//	pattern write edgeinfer/v1/plant-7/%u/cmdres/#
//	pattern write edgeinfer/v1/plant-7/%u/req/#
//	pattern read  edgeinfer/v1/plant-7/%u/cmd/#
//	pattern read  edgeinfer/v1/plant-7/%u/res/#
//	user fleet-operator
//	topic readwrite edgeinfer/v1/plant-7/#
//
// Two limits of MQTT 3.1.1 with mosquitto 2.0 to know: a publish the ACL
// refuses is acknowledged and dropped (3.1.1 has no negative PUBACK), so
// an outbox message to a forbidden topic leaves the outbox unseen; and
// mosquitto's acl_file grants every SUBSCRIBE (SUBACK 0) and just does not
// deliver what the ACL forbids. Its dynamic-security plugin does refuse
// subscriptions (SUBACK 0x80), which Subscribe reports as ErrACL
// (TestAuthAndACL).
package link
