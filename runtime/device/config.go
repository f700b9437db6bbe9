package device

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/sparkplug"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/serve"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/rollout"
)

// ErrConfig is wrapped by every configuration error; the message names the
// field (as it is spelt in the JSON form) and what it should be.
var ErrConfig = errors.New("device: bad config")

// Config is the whole device. Its JSON form is the agent's configuration
// file (edgeinfer agent --config agent.json); unknown fields are refused
// there. Every section is optional: a Config with only Engine.Models and
// HTTP is a local server (edgeinfer serve), one with a Broker is also on
// the fleet's broker, one with an Update section keeps a model up to date.
type Config struct {
	// Store is the model store file (pkg/store). The device is its one
	// holder while it runs (the update agent writes to it) and hands the
	// engine exported bundle directories (engine.StoredBundle). "" means
	// no store: the engine serves Engine.Models' directories only.
	Store string `json:"store,omitempty"`
	// Models names the store's models to serve (their active versions);
	// empty means every model with an active version.
	Models []string `json:"models,omitempty"`
	// Engine configures the engine: sessions (threads, providers), KV
	// cache and scheduler, the memory budget of the loaded models
	// (engine.memory_budget_bytes). Its Models are served beside the
	// store's (a bundle directory or a one-shot .onnx each); its Store must
	// be "": the engine loads the store's other models on demand through
	// the device's hold on the store.
	Engine engine.Config `json:"engine,omitzero"`
	// ModelKeepAlive is how long a model that can be unloaded stays loaded
	// after its last request ("5m"; engine.Config.KeepAlive, written as a
	// duration here); zero: the engine's default, 5 minutes; negative:
	// until the memory budget needs its room.
	ModelKeepAlive Duration `json:"model_keep_alive,omitempty"`
	// HTTP, when set, serves the local OpenAI-compatible HTTP API
	// (runtime/serve) over the engine, through updates and swaps.
	HTTP *HTTP `json:"http,omitempty"`

	// Broker, when set, connects the device to the fleet's MQTT broker
	// (pkg/link): status, telemetry and events through a durable outbox,
	// and commands. Fleet and Device name it (topics
	// edgeinfer/v1/<fleet>/<device>/...). The remaining fields are
	// link.Config's.
	Broker     string `json:"broker,omitempty"`
	Fleet      string `json:"fleet,omitempty"`
	Device     string `json:"device,omitempty"`
	ClientID   string `json:"client_id,omitempty"`
	Username   string `json:"username,omitempty"`
	Password   string `json:"password,omitempty"`
	CAFile     string `json:"ca_file,omitempty"`
	CertFile   string `json:"cert_file,omitempty"`
	KeyFile    string `json:"key_file,omitempty"`
	ServerName string `json:"server_name,omitempty"`
	// KeepAlive is the MQTT keep-alive (0: 30 s); BackoffMin and
	// BackoffMax bound the wait between reconnection attempts (0: the
	// link's defaults). A board on a flaky network may shorten them.
	KeepAlive  Duration `json:"keep_alive,omitempty"`
	BackoffMin Duration `json:"backoff_min,omitempty"`
	BackoffMax Duration `json:"backoff_max,omitempty"`
	// Outbox is the outbox's store file; "" means "<store>.outbox". It is
	// a file of its own: a store file has one holder, and the outbox
	// commits on every publish.
	Outbox string `json:"outbox,omitempty"`
	// OutboxMaxBytes bounds the outbox; 0 means 64 MiB.
	OutboxMaxBytes int64 `json:"outbox_max_bytes,omitempty"`
	// FlushTimeout bounds the outbox flush at shutdown; 0 means 5 s.
	FlushTimeout Duration `json:"flush_timeout,omitempty"`
	// TelemetryInterval is how often telemetry is published; 0 means 10 s.
	TelemetryInterval Duration `json:"telemetry_interval,omitempty"`
	// TelemetrySketches adds each distribution's histogram to telemetry,
	// for fleet-wide quantiles.
	TelemetrySketches bool `json:"telemetry_sketches,omitempty"`
	// Sparkplug, when set, also publishes telemetry as a Sparkplug B edge
	// node (the device name is the node id).
	Sparkplug *Sparkplug `json:"sparkplug,omitempty"`
	// Update, when set, keeps one model up to date from signed releases.
	// It needs Store and Broker.
	Update *Update `json:"update,omitempty"`

	// Board overrides the detected board name in status and telemetry.
	Board string `json:"board,omitempty"`
	// LogLevel is debug, info, warn or error; "" means info. The link's
	// set_log_level command changes it at run time. It applies to the
	// logger the device makes when Logger is nil.
	LogLevel string `json:"log_level,omitempty"`
	// Logger receives every part's logs; nil means text on stderr at
	// LogLevel.
	Logger *slog.Logger `json:"-"`
	// Now is the update agent's clock (nil: time.Now): an application
	// with a better time source than the board's RTC gives it here, and a
	// test moves it to play a board whose clock jumps.
	Now func() time.Time `json:"-"`
}

// HTTP is the local HTTP API's section: serve.Config with its token
// readable from the file (serve.Config keeps it out of JSON it writes) and
// its timeouts spelt "10s" like the file's other durations (these fields
// win over serve.Config's when set).
type HTTP struct {
	serve.Config
	// Token, when set, is the bearer token every request but /health and
	// /ready must carry.
	Token             string   `json:"token,omitempty"`
	ReadHeaderTimeout Duration `json:"read_header_timeout,omitempty"`
	IdleTimeout       Duration `json:"idle_timeout,omitempty"`
	DrainTimeout      Duration `json:"drain_timeout,omitempty"`
}

// serveConfig is the section as runtime/serve takes it.
func (h *HTTP) serveConfig() serve.Config {
	c := h.Config
	c.Token = h.Token
	for _, d := range []struct {
		v   Duration
		dst *time.Duration
	}{{h.ReadHeaderTimeout, &c.ReadHeaderTimeout}, {h.IdleTimeout, &c.IdleTimeout}, {h.DrainTimeout, &c.DrainTimeout}} {
		if d.v != 0 {
			*d.dst = time.Duration(d.v)
		}
	}
	return c
}

// Sparkplug is the Sparkplug B section.
type Sparkplug struct {
	Group string `json:"group"`
}

// Update is the update section: one model kept up to date from signed
// releases, fetched from the fleet over the broker unless Source says
// otherwise, verified, health-checked in the serving engine and swapped
// in while it serves.
type Update struct {
	Model        string `json:"model"`
	ImageRoot    string `json:"image_root"`
	DirectorRoot string `json:"director_root"`
	MetadataDir  string `json:"metadata_dir,omitempty"`
	// Source is "" (the fleet: the static host it announces, fleet serve
	// --bulk-url, and its request topics on the broker when it announces
	// none or the host fails), a repository directory or an http(s)://
	// base URL; SourceCAFile trusts a private CA for an HTTPS host (the
	// announced one too; "": the system's roots).
	Source       string            `json:"source,omitempty"`
	SourceCAFile string            `json:"source_ca_file,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Providers    []string          `json:"providers,omitempty"`
	// CheckInterval and RetryInterval: 0 means update/rollout's defaults.
	CheckInterval  Duration `json:"check_interval,omitempty"`
	RetryInterval  Duration `json:"retry_interval,omitempty"`
	MaxBytesPerSec int64    `json:"max_bytes_per_sec,omitempty"`
	// RequestTimeout bounds one metadata or chunk request to the fleet
	// over the broker; 0 means 15 s. An unanswered request fails and the
	// download resumes later, fetching only what is missing.
	RequestTimeout Duration `json:"request_timeout,omitempty"`
	// KeepVersions is how many versions of the model stay on the device:
	// 0 means the active and the previous one.
	KeepVersions int `json:"keep_versions,omitempty"`
}

// Duration is a time.Duration spelt "10s" in JSON.
type Duration time.Duration

// MarshalText writes the duration as Go prints it ("1m30s").
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration ("10s", "5m").
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return &badDuration{string(b)}
	}
	*d = Duration(v)
	return nil
}

// badDuration is a Duration's refusal, kept apart so LoadConfig can name
// the field.
type badDuration struct{ text string }

func (e *badDuration) Error() string { return fmt.Sprintf("%q is not a duration like \"10s\"", e.text) }

// fieldOf is the dotted name of the field holding the string v in raw.
func fieldOf(raw map[string]any, prefix, v string) string {
	for k, x := range raw {
		switch x := x.(type) {
		case string:
			if x == v {
				return prefix + k
			}
		case map[string]any:
			if f := fieldOf(x, prefix+k+".", v); f != "" {
				return f
			}
		}
	}
	return ""
}

// LoadConfig reads a Config from its JSON file, refusing unknown fields,
// and validates it. Errors name the file and the field.
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var bad *badDuration
		if errors.As(err, &bad) {
			// encoding/json does not say which field a text unmarshaler
			// refused: find it by its value.
			var raw map[string]any
			_ = json.Unmarshal(b, &raw)
			return c, fmt.Errorf("%w: %s: %s: %w", ErrConfig, path, fieldOf(raw, "", bad.text), err)
		}
		return c, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate reports the first invalid field, by its JSON name.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	if c.Store == "" && len(c.Engine.Models) == 0 {
		return bad("store", "required (the model store file), unless engine.models lists bundles to serve")
	}
	if c.Engine.Store != "" {
		return bad("engine.store", "the device holds the store: set store, not engine.store")
	}
	if len(c.Models) > 0 && c.Store == "" {
		return bad("models", "names models of the store, and store is empty")
	}
	if err := c.Engine.Validate(); err != nil {
		return bad("engine", "%v", err)
	}
	if c.HTTP != nil {
		if err := c.HTTP.serveConfig().Validate(); err != nil {
			return bad("http", "%v", err)
		}
	}
	for _, d := range []struct {
		name string
		v    Duration
		min  time.Duration
	}{{"telemetry_interval", c.TelemetryInterval, 100 * time.Millisecond}, {"flush_timeout", c.FlushTimeout, 0}} {
		if d.v < 0 || (d.v > 0 && time.Duration(d.v) < d.min) {
			return bad(d.name, "%v is below %v", time.Duration(d.v), d.min)
		}
	}
	if c.OutboxMaxBytes < 0 {
		return bad("outbox_max_bytes", "negative")
	}
	if c.LogLevel != "" {
		var lv slog.Level
		if err := lv.UnmarshalText([]byte(c.LogLevel)); err != nil {
			return bad("log_level", "%q (want debug, info, warn or error)", c.LogLevel)
		}
	}
	if c.Broker == "" {
		for _, f := range []struct {
			name string
			set  bool
		}{{"sparkplug", c.Sparkplug != nil}, {"update", c.Update != nil}, {"fleet", c.Fleet != ""}, {"device", c.Device != ""}} {
			if f.set {
				return bad(f.name, "needs broker (the device is on no broker without it)")
			}
		}
		return nil
	}
	if c.Store == "" && c.Outbox == "" {
		return bad("outbox", "required when store is empty (the outbox needs a file of its own)")
	}
	if err := c.LinkConfig().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if u := c.Update; u != nil {
		if c.Store == "" {
			return bad("update", "needs store (releases are kept there)")
		}
		if u.CheckInterval < 0 || u.RetryInterval < 0 || u.RequestTimeout < 0 {
			return bad("update", "check_interval, retry_interval and request_timeout must be positive durations like \"5m\"")
		}
		ucfg := update.Config{Model: u.Model, ImageRoot: u.ImageRoot, DirectorRoot: u.DirectorRoot, MaxBytesPerSec: u.MaxBytesPerSec, Keep: u.KeepVersions}
		if err := ucfg.Validate(); err != nil {
			return fmt.Errorf("%w: update: %w", ErrConfig, err)
		}
		if err := (rollout.Config{Labels: u.Labels}).Validate(); err != nil {
			return fmt.Errorf("%w: update: %w", ErrConfig, err)
		}
	}
	if c.Sparkplug != nil {
		if err := (sparkplug.Config{Group: c.Sparkplug.Group, Node: c.Device}).Validate(); err != nil {
			return fmt.Errorf("%w: sparkplug: %w", ErrConfig, err)
		}
	}
	return nil
}

// LinkConfig is the link's part of the config (an operator's tool
// reaching the device's topics uses it too).
func (c Config) LinkConfig() link.Config {
	return link.Config{Broker: c.Broker, Fleet: c.Fleet, Device: c.Device, ClientID: c.ClientID, Username: c.Username,
		Password: c.Password, CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, ServerName: c.ServerName,
		KeepAlive: time.Duration(c.KeepAlive), BackoffMin: time.Duration(c.BackoffMin), BackoffMax: time.Duration(c.BackoffMax)}
}

// withDefaults fills the documented zero values.
func (c Config) withDefaults() Config {
	if c.Broker != "" && c.Outbox == "" {
		c.Outbox = c.Store + ".outbox"
	}
	if c.TelemetryInterval == 0 {
		c.TelemetryInterval = Duration(10 * time.Second)
	}
	if c.FlushTimeout == 0 {
		c.FlushTimeout = Duration(5 * time.Second)
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	return c
}
