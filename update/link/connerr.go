package link

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
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
		unknownCA *x509.UnknownAuthorityError
		hostname  x509.HostnameError
		hostPtr   *x509.HostnameError
		invalid   x509.CertificateInvalidError
		invPtr    *x509.CertificateInvalidError
		netErr    net.Error
		opErr     *net.OpError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &unknownCA):
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
		return fmt.Errorf("%w: the broker says the client is not authorised (user %q; check its password file or auth plugin): %w", ErrAuth, cfg.Username, err)
	case errors.Is(err, packets.ErrorRefusedIDRejected):
		return fmt.Errorf("%w: the broker rejected client id %q: %w", ErrAuth, cfg.ClientID, err)
	case errors.As(err, &opErr) && opErr.Op == "dial", errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, cfg.Broker, err)
	case errors.Is(err, io.EOF) || strings.Contains(msg, "connection reset"):
		if cfg.CertFile != "" {
			return fmt.Errorf("%w: the broker closed the connection during the handshake (under TLS 1.3 this is how a refused client certificate %q shows): %w", ErrBadCertificate, cfg.CertFile, err)
		}
		return fmt.Errorf("%w: the broker closed the connection during the handshake: %w", ErrUnreachable, err)
	}
	return fmt.Errorf("link: connect to %s: %w", cfg.Broker, err)
}
