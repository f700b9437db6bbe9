package link

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// classify maps what paho, crypto/tls and net report for a failed
// connection attempt to one of the link's sentinels, with the cause and
// what to do in the message. The original error stays in the chain.
func classify(cfg *Config, err error) error {
	if err == nil {
		return nil
	}
	var (
		unknownCA x509.UnknownAuthorityError
		unknownP  *x509.UnknownAuthorityError
		hostname  x509.HostnameError
		hostPtr   *x509.HostnameError
		invalid   x509.CertificateInvalidError
		invPtr    *x509.CertificateInvalidError
		netErr    net.Error
		opErr     *net.OpError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &unknownP):
		return fmt.Errorf("%w: the broker's certificate is not signed by a CA in ca_file %q (give the CA that issued it): %w", ErrUnknownCA, cfg.CAFile, err)
	case errors.As(err, &hostname), errors.As(err, &hostPtr):
		return fmt.Errorf("%w: the broker's certificate does not name the host in %q (fix the URL or set server_name): %w", ErrHostname, cfg.Broker, err)
	case errors.As(err, &invalid), errors.As(err, &invPtr):
		return fmt.Errorf("%w: the broker's certificate is invalid (expired, not yet valid or not for servers): %w", ErrBadCertificate, err)
	case strings.Contains(msg, "remote error: tls: unknown certificate authority"):
		return fmt.Errorf("%w: the broker does not trust the CA of the device's certificate %q: %w", ErrUnknownCA, cfg.CertFile, err)
	case strings.Contains(msg, "remote error: tls: expired certificate"):
		return fmt.Errorf("%w: the broker refused the device's certificate %q as expired (renew it): %w", ErrBadCertificate, cfg.CertFile, err)
	case strings.Contains(msg, "remote error: tls: certificate required"):
		return fmt.Errorf("%w: the broker requires a client certificate (set cert_file and key_file): %w", ErrBadCertificate, err)
	case strings.Contains(msg, "remote error: tls:"):
		return fmt.Errorf("%w: the broker refused the TLS handshake (check cert_file %q and the broker's cafile): %w", ErrBadCertificate, cfg.CertFile, err)
	case errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword):
		return fmt.Errorf("%w: bad user name or password for %q: %w", ErrAuth, cfg.Username, err)
	case errors.Is(err, packets.ErrorRefusedNotAuthorised):
		// mosquitto 2.0 answers a wrong password with this code too
		return fmt.Errorf("%w: the broker refused user %q (wrong user name or password, or not allowed to connect): %w", ErrAuth, cfg.Username, err)
	case errors.Is(err, packets.ErrorRefusedIDRejected):
		return fmt.Errorf("%w: the broker rejected client id %q: %w", ErrAuth, cfg.ClientID, err)
	case errors.As(err, &opErr) && opErr.Op == "dial", errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, cfg.Broker, err)
	case errors.Is(err, io.EOF) || strings.Contains(msg, "connection reset"):
		if u, _ := url.Parse(cfg.Broker); u != nil && tlsScheme(u.Scheme) {
			// Under TLS 1.3 the client's handshake ends before the broker
			// has checked the client certificate: its refusal arrives as an
			// alert or, as often, a reset when CONNECT is written.
			if cfg.CertFile == "" {
				return fmt.Errorf("%w: the broker closed the TLS connection before CONNACK: it may require a client certificate (set cert_file and key_file): %w", ErrBadCertificate, err)
			}
			return fmt.Errorf("%w: the broker closed the TLS connection before CONNACK: it may refuse the client certificate %q: %w", ErrBadCertificate, cfg.CertFile, err)
		}
		return fmt.Errorf("%w: the broker closed the connection during the handshake: %w", ErrUnreachable, err)
	}
	return fmt.Errorf("link: connect to %s: %w", cfg.Broker, err)
}
