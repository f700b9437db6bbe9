package device

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/edgeinfer/edgeinfer/runtime/serve"
)

// openHTTP starts the local HTTP API (runtime/serve) over the engine. It
// starts last: a request it answers finds the engine, the link and the
// updates running. It stops first: in-flight streams drain before the
// engine closes.
func (d *Device) openHTTP() error {
	cfg := d.cfg.HTTP.serveConfig()
	srv, err := serve.New(d.eng, cfg, d.log)
	if err != nil {
		return fmt.Errorf("device: http: %w", err)
	}
	ln, err := net.Listen("tcp", srv.Addr())
	if err != nil {
		return fmt.Errorf("device: http: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.http.srv, d.http.ln, d.http.done = srv, ln, make(chan struct{})
	go func() {
		defer close(d.http.done)
		d.http.err = srv.Serve(ctx, ln)
	}()
	d.onClose(func() error {
		// Serve drains on cancel: no new requests, running streams get
		// the drain timeout.
		cancel()
		<-d.http.done
		return d.http.err
	})
	return nil
}

// Handle mounts an application's handler on the device's HTTP API, beside
// the OpenAI-compatible endpoints and behind the same token (see
// serve.Server.Handle): a kiosk's page is served by the device itself.
func (d *Device) Handle(pattern string, h http.Handler) error {
	if d.http.srv == nil {
		return fmt.Errorf("%w: http: the device has no HTTP API to mount %q on (add an http section)", ErrConfig, pattern)
	}
	d.http.srv.Handle(pattern, h)
	return nil
}

// HTTPAddr is the HTTP API's listening address ("" without one): with
// addr "127.0.0.1:0" the port is chosen at Open.
func (d *Device) HTTPAddr() string {
	if d.http.ln == nil {
		return ""
	}
	return d.http.ln.Addr().String()
}

// httpDone is closed when the API stops (on its own, or at Close); nil
// (never ready) without an API.
func (d *Device) httpDone() <-chan struct{} { return d.http.done }
