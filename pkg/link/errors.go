package link

import "errors"

// Sentinel errors. Operations wrap them with %w and what was being done, so
// callers test with errors.Is; the wrapped text names the cause and what to
// do about it.
var (
	// ErrConfig: a Config field is invalid; the message names the field.
	ErrConfig = errors.New("link: bad config")
	// ErrClosed: the link or outbox has been closed.
	ErrClosed = errors.New("link: closed")
	// ErrUnreachable: no TCP connection to the broker (refused, no route,
	// DNS, timeout).
	ErrUnreachable = errors.New("link: broker unreachable")
	// ErrBadCertificate: a certificate in the TLS handshake was refused —
	// the broker's (expired, not yet valid, wrong usage) or, when the broker
	// says so, the device's client certificate.
	ErrBadCertificate = errors.New("link: bad certificate")
	// ErrUnknownCA: the broker's certificate is not signed by a CA in
	// Config.CAFile (or the broker refused the device's certificate issuer).
	ErrUnknownCA = errors.New("link: certificate signed by an unknown CA")
	// ErrHostname: the broker's certificate is not valid for the host name
	// in Config.Broker (set Config.ServerName if it differs).
	ErrHostname = errors.New("link: certificate hostname mismatch")
	// ErrAuth: the broker refused the connection (bad user name or
	// password, identifier rejected, not authorised).
	ErrAuth = errors.New("link: authentication refused")
	// ErrACL: the broker refused a subscription (SUBACK 0x80, what
	// mosquitto's ACL answers). A refused publish at QoS 1 cannot be seen in
	// MQTT 3.1.1: mosquitto acknowledges and drops it.
	ErrACL = errors.New("link: refused by the broker's ACL")
	// ErrNotConnected: the operation needs a live connection.
	ErrNotConnected = errors.New("link: not connected")
	// ErrTimeout: the broker did not answer in time.
	ErrTimeout = errors.New("link: timed out")
	// ErrOutboxFull: the outbox is at its byte bound and holds only
	// messages it never drops (status, events); the message was not taken.
	ErrOutboxFull = errors.New("link: outbox full")
	// ErrCorrupt: an outbox record does not decode.
	ErrCorrupt = errors.New("link: corrupt outbox record")
)
