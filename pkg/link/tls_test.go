package link

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

// pki writes a CA, certificates signed by it and their keys as PEM files.
type pki struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	File string // the CA certificate
}

func newCA(t *testing.T, dir, name string) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{dir: dir, cert: cert, key: key, File: filepath.Join(dir, name+".pem")}
	writePEM(t, p.File, "CERTIFICATE", der)
	return p
}

// issue signs a leaf certificate; it returns the cert and key file paths.
func (p *pki) issue(t *testing.T, name string, server bool, notAfter time.Time, dns ...string) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: dns,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	cf, kf := filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	writePEM(t, cf, "CERTIFICATE", der)
	writePEM(t, kf, "EC PRIVATE KEY", kder)
	return cf, kf
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

// connectErr opens a link with cfg and returns the error of its first
// failed attempt, or nil once it is connected (waiting up to 10 s).
func connectErr(t *testing.T, cfg Config) error {
	t.Helper()
	cfg.BackoffMin, cfg.BackoffMax, cfg.ConnectTimeout = 50*time.Millisecond, 200*time.Millisecond, 5*time.Second
	l, err := Open(context.Background(), cfg, nil)
	if err != nil {
		return err
	}
	defer l.Close()
	if !waitFor(10*time.Second, l.Changed, func() bool { st := l.Stats(); return st.Connected || st.Failures > 0 }) {
		return errors.New("neither connected nor failed within 10 s")
	}
	if l.Stats().Connected {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.lastErr
}

func TestTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca, other := newCA(t, dir, "ca"), newCA(t, dir, "other-ca")
	srvCert, srvKey := ca.issue(t, "broker", true, time.Now().Add(24*time.Hour), "localhost")
	devCert, devKey := ca.issue(t, "device", false, time.Now().Add(24*time.Hour))
	oldCert, oldKey := ca.issue(t, "expired", false, time.Now().Add(-time.Hour))
	strangerCert, strangerKey := other.issue(t, "stranger", false, time.Now().Add(24*time.Hour))

	tlsBroker := mosquittotest.Start(t, mosquittotest.Options{CAFile: ca.File, CertFile: srvCert, KeyFile: srvKey})
	mtlsBroker := mosquittotest.Start(t, mosquittotest.Options{CAFile: ca.File, CertFile: srvCert, KeyFile: srvKey, RequireClientCert: true})
	base := func(b *mosquittotest.Broker) Config {
		return Config{Broker: b.URL(), Fleet: "f", Device: "d", CAFile: ca.File}
	}

	cases := []struct {
		name string
		cfg  func() Config
		want error // nil: connects
		alt  error // also accepted: under TLS 1.3 the broker's alert races a reset
	}{
		{"tls", func() Config { return base(tlsBroker) }, nil, nil},
		{"wrong CA", func() Config { c := base(tlsBroker); c.CAFile = other.File; return c }, ErrUnknownCA, nil},
		{"hostname mismatch", func() Config {
			c := base(tlsBroker)
			c.Broker = "ssl://127.0.0.1:" + itoa(tlsBroker.Port) // the certificate names localhost only
			return c
		}, ErrHostname, nil},
		{"mtls", func() Config { c := base(mtlsBroker); c.CertFile, c.KeyFile = devCert, devKey; return c }, nil, nil},
		{"mtls without client cert", func() Config { return base(mtlsBroker) }, ErrBadCertificate, nil},
		{"mtls expired client cert", func() Config { c := base(mtlsBroker); c.CertFile, c.KeyFile = oldCert, oldKey; return c }, ErrBadCertificate, nil},
		{"mtls client cert of another CA", func() Config {
			c := base(mtlsBroker)
			c.CertFile, c.KeyFile = strangerCert, strangerKey
			return c
		}, ErrUnknownCA, ErrBadCertificate},
		{"unreachable", func() Config {
			return Config{Broker: "tcp://127.0.0.1:" + itoa(mosquittotest.FreePort(t)), Fleet: "f", Device: "d"}
		}, ErrUnreachable, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := connectErr(t, tc.cfg())
			t.Logf("%v", err)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("want a connection, got %v", err)
			case tc.want != nil && !errors.Is(err, tc.want) && (tc.alt == nil || !errors.Is(err, tc.alt)):
				t.Fatalf("want %v, got %v", tc.want, err)
			}
		})
	}
}

func TestAuthAndACL(t *testing.T) {
	// the rule a fleet uses: each device only in its own subtree (the
	// dynamic-security plugin of mosquitto 2.0.11 does not expand %u in
	// its ACLs, so the test names the device; acl_file patterns do)
	b := mosquittotest.Start(t, mosquittotest.Options{DynSec: &mosquittotest.DynSec{
		Users: map[string]string{"d": "secret"},
		ACLs: []mosquittotest.DynACL{
			{Type: "publishClientSend", Topic: "edgeinfer/v1/f/d/#", Allow: true},
			{Type: "subscribePattern", Topic: "edgeinfer/v1/f/d/#", Allow: true},
		},
	}})
	cfg := Config{Broker: b.URL(), Fleet: "f", Device: "d", Username: "d", Password: "wrong"}
	if err := connectErr(t, cfg); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong password: %v, want ErrAuth", err)
	} else {
		t.Logf("wrong password: %v", err)
	}
	cfg.Password = "secret"
	cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, 200*time.Millisecond
	l, err := Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := withTimeout(t, 5*time.Second)
	if err := l.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Subscribe(ctx, l.Topics().Cmd("+"), 1, func(Message) {}); err != nil {
		t.Fatalf("own subtree: %v\n%s", err, b.Log())
	}
	err = l.Subscribe(ctx, "edgeinfer/v1/f/other/cmd/+", 1, func(Message) {})
	if !errors.Is(err, ErrACL) {
		t.Fatalf("another device's topics: %v, want ErrACL", err)
	}
	t.Logf("refused: %v", err)
}

func itoa(n int) string { return net.JoinHostPort("", itoaDigits(n))[1:] }

func itoaDigits(n int) string { return big.NewInt(int64(n)).String() }
