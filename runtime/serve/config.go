package serve

import (
	"fmt"
	"time"
)

// Config configures a Server. It is plain data; zero values are the
// documented defaults.
type Config struct {
	// Addr is the listen address; "" means 127.0.0.1:8080 (loopback only:
	// exposing the API beyond the device is a decision, not a default).
	Addr string `json:"addr,omitempty"`
	// Token, when set, is the bearer token every request but /health and
	// /ready must carry (Authorization: Bearer <token>).
	Token string `json:"-"`
	// TLSCertFile and TLSKeyFile, both set, serve HTTPS.
	TLSCertFile string `json:"tls_cert_file,omitempty"`
	TLSKeyFile  string `json:"tls_key_file,omitempty"`
	// MaxBodyBytes bounds a text request's body; 0 means 1 MiB.
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`
	// MaxInferBodyBytes bounds a /v1/infer body; 0 means 64 MiB.
	MaxInferBodyBytes int64 `json:"max_infer_body_bytes,omitempty"`
	// MaxPromptTokens bounds a prompt beyond the model's context; 0 means
	// the context alone bounds it.
	MaxPromptTokens int `json:"max_prompt_tokens,omitempty"`
	// ReadHeaderTimeout bounds reading a request's headers; 0 means 10 s.
	ReadHeaderTimeout time.Duration `json:"read_header_timeout,omitempty"`
	// IdleTimeout closes idle keep-alive connections; 0 means 120 s.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// DrainTimeout is how long Shutdown lets running streams finish
	// before cancelling them; 0 means 30 s.
	DrainTimeout time.Duration `json:"drain_timeout,omitempty"`
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max_body_bytes", c.MaxBodyBytes}, {"max_infer_body_bytes", c.MaxInferBodyBytes},
		{"max_prompt_tokens", int64(c.MaxPromptTokens)}, {"read_header_timeout", int64(c.ReadHeaderTimeout)},
		{"idle_timeout", int64(c.IdleTimeout)}, {"drain_timeout", int64(c.DrainTimeout)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s must be ≥ 0, got %d", ErrConfig, f.name, f.v)
		}
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return fmt.Errorf("%w: tls_cert_file and tls_key_file go together", ErrConfig)
	}
	return nil
}

func (c Config) withDefaults() Config {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
	}
	def(&c.MaxBodyBytes, 1<<20)
	def(&c.MaxInferBodyBytes, 64<<20)
	def((*int64)(&c.ReadHeaderTimeout), int64(10*time.Second))
	def((*int64)(&c.IdleTimeout), int64(120*time.Second))
	def((*int64)(&c.DrainTimeout), int64(30*time.Second))
	return c
}
