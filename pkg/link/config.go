package link

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"
)

// Config configures a Link: plain data with documented zero values, so it
// can come from the agent's JSON file.
type Config struct {
	// Broker is the broker's URL: tcp://host:port (plain), or ssl://,
	// tls:// or mqtts://host:port (TLS). Required.
	Broker string `json:"broker"`
	// Fleet and Device name the device in topics
	// (edgeinfer/v1/<fleet>/<device>/...). Both required; neither may hold
	// '/', '+', '#' or be empty.
	Fleet  string `json:"fleet"`
	Device string `json:"device"`
	// ClientID is the MQTT client identifier; "" means "<fleet>.<device>".
	// It must be stable: the broker keeps the device's session (clean
	// session false) under it.
	ClientID string `json:"client_id,omitempty"`
	// Username and Password authenticate to the broker; "" sends none.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// CAFile is a PEM file of the CAs that sign the broker's certificate;
	// "" uses the system pool. CertFile and KeyFile are the device's client
	// certificate and key for mutual TLS; both or neither.
	CAFile   string `json:"ca_file,omitempty"`
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// ServerName overrides the host name checked against the broker's
	// certificate; "" uses the host of Broker.
	ServerName string `json:"server_name,omitempty"`
	// KeepAlive is the MQTT keep-alive; 0 means 30 s.
	KeepAlive time.Duration `json:"keep_alive,omitempty"`
	// ConnectTimeout bounds one connection attempt (TCP, TLS, CONNACK);
	// 0 means 10 s.
	ConnectTimeout time.Duration `json:"connect_timeout,omitempty"`
	// BackoffMin and BackoffMax bound the wait between connection
	// attempts: it doubles from BackoffMin up to BackoffMax, each wait
	// drawn uniformly from [d/2, d] (jitter, so a fleet that lost its broker
	// does not reconnect in step). 0 means 500 ms and 30 s.
	BackoffMin time.Duration `json:"backoff_min,omitempty"`
	BackoffMax time.Duration `json:"backoff_max,omitempty"`
	// QueueLen is each subscription's handler queue; a message arriving
	// when it is full is dropped and counted (Stats.HandlerDrops) rather
	// than stalling the connection. 0 means 64.
	QueueLen int `json:"queue_len,omitempty"`
	// CleanSession asks the broker to forget this client's session when it
	// disconnects. A device never sets it (commands must wait for it while
	// it is away); a cloud-side service in a shared subscription group
	// (fleet serve) does, or the broker would keep queueing the group's
	// messages for an instance that died. Zero (false): persistent session.
	CleanSession bool `json:"clean_session,omitempty"`
	// Once makes one connection attempt and never reconnects: when it
	// fails or its connection is lost, the link has ended (Link.Ended).
	// It is for a session whose loss means something — fleet serve's
	// leadership claim, which the broker takes away by handing the
	// client id to another — where reconnecting would take it back.
	Once bool `json:"once,omitempty"`
	// Logger receives the link's logs; nil discards them.
	Logger *slog.Logger `json:"-"`
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	u, err := url.Parse(c.Broker)
	switch {
	case c.Broker == "":
		return fmt.Errorf("%w: broker is empty (want tcp://host:port or ssl://host:port)", ErrConfig)
	case err != nil:
		return fmt.Errorf("%w: broker %q: %v", ErrConfig, c.Broker, err)
	case !plainScheme(u.Scheme) && !tlsScheme(u.Scheme):
		return fmt.Errorf("%w: broker %q: scheme %q (want tcp, ssl, tls or mqtts)", ErrConfig, c.Broker, u.Scheme)
	case u.Port() == "":
		return fmt.Errorf("%w: broker %q has no port", ErrConfig, c.Broker)
	}
	for _, f := range []struct{ name, v string }{{"fleet", c.Fleet}, {"device", c.Device}} {
		if f.v == "" || strings.ContainsAny(f.v, "/+#\x00") {
			return fmt.Errorf("%w: %s %q must be non-empty without '/', '+' or '#'", ErrConfig, f.name, f.v)
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%w: cert_file and key_file go together (mutual TLS needs both)", ErrConfig)
	}
	if (c.CAFile != "" || c.CertFile != "") && !tlsScheme(u.Scheme) {
		return fmt.Errorf("%w: ca_file/cert_file given but broker %q is not TLS (use ssl://)", ErrConfig, c.Broker)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"keep_alive", c.KeepAlive}, {"connect_timeout", c.ConnectTimeout}, {"backoff_min", c.BackoffMin}, {"backoff_max", c.BackoffMax}} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s is negative", ErrConfig, d.name)
		}
	}
	if c.BackoffMax != 0 && c.BackoffMax < c.BackoffMin {
		return fmt.Errorf("%w: backoff_max %v is below backoff_min %v", ErrConfig, c.BackoffMax, c.BackoffMin)
	}
	if c.QueueLen < 0 {
		return fmt.Errorf("%w: queue_len is negative", ErrConfig)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.ClientID == "" {
		c.ClientID = c.Fleet + "." + c.Device
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 30 * time.Second
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 500 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(30*time.Second, c.BackoffMin)
	}
	if c.QueueLen == 0 {
		c.QueueLen = 64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func plainScheme(s string) bool { return s == "tcp" || s == "mqtt" }
func tlsScheme(s string) bool   { return s == "ssl" || s == "tls" || s == "mqtts" }
